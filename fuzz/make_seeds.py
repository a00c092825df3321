#!/usr/bin/env python3
"""Writes the hand-made seed inputs of fuzz/corpus/NAME/ (stdlib only; run
from the repository root). The real files beside them came from a tiny
`ptdp train --save` run (docs/reliability.md gives the command)."""
import json
import os
import struct

C = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(name, fname, data):
    os.makedirs(os.path.join(C, name), exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(C, name, fname), "wb") as f:
        f.write(data)


def st(header, data=b"", pad=True):
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


# ---- safetensors
f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.0)
put("safetensors", "seed_two_tensors", st({"__metadata__": {"format": "pt", "k": "v"},
    "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
    "b": {"dtype": "I64", "shape": [1], "data_offsets": [16, 24]}}, f32 + struct.pack("<q", 7)))
put("safetensors", "seed_dtypes", st({
    "h": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]},
    "bf": {"dtype": "BF16", "shape": [2], "data_offsets": [4, 8]},
    "d": {"dtype": "F64", "shape": [], "data_offsets": [8, 16]},
    "u": {"dtype": "U16", "shape": [1], "data_offsets": [16, 18]},
    "b": {"dtype": "U8", "shape": [2], "data_offsets": [18, 20]},
    "z": {"dtype": "I32", "shape": [0, 3], "data_offsets": [20, 20]}}, bytes(range(20))))
put("safetensors", "bad_overlap", st({
    "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
    "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12)))
put("safetensors", "bad_huge_shape", st({
    "a": {"dtype": "F32", "shape": [4294967296, 4294967296, 16], "data_offsets": [0, 8]}}, bytes(8)))
put("safetensors", "bad_header_len", struct.pack("<Q", 2**63) + b"{}")
put("safetensors", "bad_deep", struct.pack("<Q", 4000) + b"[" * 4000)

# ---- manifest (a real one is real_manifest.json)
man = {"format": "ptdp-checkpoint", "version": 1, "iteration": 1, "consumed_samples": 1,
       "optimizer_step": 1, "has_optimizer": True,
       "model": {"num_layers": 1, "hidden_size": 8, "num_attention_heads": 2, "ffn_hidden_size": 32,
                 "seq_length": 4, "max_position_embeddings": 4, "vocab_size": 16,
                 "padded_vocab_size": 16},
       "training": {"seed": 1234, "global_batch_size": 1, "lr": 1e-3, "min_lr": 0,
                    "lr_decay_style": "linear"},
       "layout": {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1,
                  "data_parallel_size": 1, "virtual_pipeline_model_parallel_size": 1,
                  "use_distributed_optimizer": False, "world_size": 1},
       "files": [{"name": "rank_00000.safetensors", "rank": 0, "bytes": 100, "crc32": "0a0b0c0d"}],
       "tensors": [{"name": "w", "shape": [4, 3]}],
       "shards": [{"tensor": "w", "kind": "param", "key": "param/w", "file": 0, "shape": [4, 3],
                   "rows": [0, 4], "cols": [0, 3], "elements": [0, 12]}]}
put("manifest", "seed_small.json", json.dumps(man))
m2 = json.loads(json.dumps(man))
m2["files"][0]["name"] = "../../etc/passwd"
put("manifest", "bad_escape.json", json.dumps(m2))
m3 = json.loads(json.dumps(man))
m3["shards"][0].update({"rows": [0, 4], "cols": [0, 0], "elements": [-5, 0]})
put("manifest", "bad_zero_width.json", json.dumps(m3))
m4 = json.loads(json.dumps(man))
m4["tensors"][0]["shape"] = [4294967296, 4294967296]
m4["iteration"] = 1e300
put("manifest", "bad_overflow.json", json.dumps(m4))

# ---- idx: .idx followed by .bin
def idx(lengths, docs, dtype=8, es=2):
    s, d = len(lengths), len(docs)
    out = b"MMIDIDX\0\0" + struct.pack("<QBQQ", 1, dtype, s, d)
    out += struct.pack("<%di" % s, *lengths)
    ptr, ptrs = 0, []
    for n in lengths:
        ptrs.append(ptr)
        ptr += n * es
    out += struct.pack("<%dq" % s, *ptrs) + struct.pack("<%dq" % d, *docs)
    return out + bytes(range(ptr % 256)) * 0 + b"\x01\x00" * (ptr // 2)

put("idx", "seed_u16", idx([3, 2, 4], [0, 1, 3]))
put("idx", "seed_i32", idx([2, 1], [0, 2], dtype=4, es=4))
put("idx", "seed_empty", idx([], [0]))
put("idx", "bad_boundaries", idx([1, 1], [0, 2, 1]))

# ---- bpe: encoder.json NUL vocab.bpe NUL text
def byte_unicode():
    keep = [b for b in range(256) if ord("!") <= b <= ord("~") or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF]
    n, m = 0, {}
    for b in range(256):
        if b in keep:
            m[b] = chr(b)
        else:
            m[b] = chr(256 + n)
            n += 1
    return m

bu = byte_unicode()
vocab = {bu[b]: b for b in range(256)}
merges = ["h e", "l l", "he ll", "hell o", "\u0120 w", "\u0120w o", "r l", "\u0120wo rl", "\u0120worl d"]
for mm in merges:
    a, b = mm.split(" ")
    vocab[a + b] = len(vocab)
vocab["<|endoftext|>"] = len(vocab)
put("bpe", "seed_hello", json.dumps(vocab) + "\0#version: 0.2\n" + "\n".join(merges) + "\n\0hello world, hello!\n\u00e9\u4e2d 123 's 've")
put("bpe", "bad_missing_byte", json.dumps({k: v for k, v in vocab.items() if v != 65}) + "\0\0abc")
put("bpe", "bad_big_id", json.dumps(dict(vocab, x=99999999)) + "\0\0x")

# ---- config (a real --dump-config output is real_dump_config.json)
put("config", "seed_small.json", json.dumps({"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
    "seq_length": 32, "max_position_embeddings": 32, "micro_batch_size": 2, "global_batch_size": 8,
    "lr": 3e-4, "train_iters": 10, "mock_data": True, "tensor_model_parallel_size": 2,
    "pipeline_model_parallel_size": 2, "lr_decay_style": "cosine"}))
put("config", "bad_types.json", '{"num_layers": "two", "lr": [1], "seed": 1e300, "hidden_size": -1}')
put("config", "bad_deep.json", "{\"a\":" * 100 + "1" + "}" * 100)

# ---- jsonl
put("jsonl", "seed.jsonl", '{"text": "hello the thing", "title": "in"}\n\n{"text": "a\\u0000b \\ud83d\\ude00", "id": 3}\n{"title": "x", "text": ""}\n')
put("jsonl", "bad_lines.jsonl", '{"text": 1}\n[1,2]\n{"text": "unterminated\n' + "[" * 2000 + "\n")

# ---- decode ids
put("decode_ids", "seed.txt", "0 1 2 104 101\n266 267\t  268\r\n\n265\n")
put("decode_ids", "bad.txt", "1 99999999999999999999999999\n-1 +2 0x10\n12a\n\0 3\n")

# ---- token file: seq byte, vocab u16, tokens
put("token_file", "seed", bytes([7]) + struct.pack("<H", 300) + struct.pack("<20H", *range(0, 300, 15)))
put("token_file", "bad_token", bytes([3]) + struct.pack("<H", 9) + struct.pack("<5H", 1, 2, 3, 10, 4))
put("token_file", "bad_odd", bytes([3]) + struct.pack("<H", 10) + b"\x01\x00\x02")

# ---- zip (stored entries, as torch.save writes them; the real torch.save
# files are in corpus/torch)
import io
import zipfile


def zipped(entries, method=zipfile.ZIP_STORED):
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", compression=method) as z:
        for name, data in entries:
            z.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data, compress_type=method)
    return b.getvalue()


two = [("archive/data.pkl", b"\x80\x02}q\x00."), ("archive/data/0", struct.pack("<4f", 1, 2, 3, 4))]
put("zip", "seed_two_entries", zipped(two))
put("zip", "bad_deflated", zipped(two, zipfile.ZIP_DEFLATED))
crc = bytearray(zipped(two))
crc[crc.index(b"\x80\x02")] ^= 0xFF  # a byte of the first entry's data
put("zip", "bad_crc", bytes(crc))
