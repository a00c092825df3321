#!/usr/bin/python3
"""make_megatron_fixtures.py - the Megatron-LM checkpoints of tests/test_megatron_ckpt.sh,
built with Debian's python3-torch (1.13) from known weights, so CI needs no PyTorch.

A tiny GPT (l=2, h=8, a=2, ffn=32, max positions 16, vocabulary 50 padded by Megatron
to a multiple of 8 x t) is drawn once; every weight is a bf16 value, so the bf16 copy
is exact. Written under tests/fixtures/megatron/ (run from the repository root):

  weights.safetensors  the same weights as Hugging Face GPT-2 tensors (ptdp --init-from)
  core_t1p1/           Megatron-Core local-spec names, t=1 p=1, fp32, with args,
                       optimizer, scheduler and RNG states like a real save
  core_t2p2/           Megatron-Core names, t=2 p=2 (layer numbers local to the stage,
                       output_layer.weight on the last stage), bf16 tensors
  te_t1p1/             Transformer Engine names (linear_qkv.layer_norm_weight, ...,
                       _extra_state entries), t=1 p=1
  legacy_t2p1/         legacy Megatron (nested language_model/embedding/encoder dicts,
                       query_key_value, dense_h_to_4h ...), t=2 p=1, release checkpoint
  core_t1p2v2/         a 4-layer model of its own (weights_l4.safetensors), t=1 p=2 with
                       2 virtual chunks per rank ('model0', 'model1'): chunk c of pipeline
                       rank r is virtual stage c*2 + r, one layer each

The layout follows Megatron-LM's megatron/training/checkpointing.py (iter_%07d or
release, mp_rank_%02d[_%03d]/model_optim_rng.pt) and the names its GPT models and
tools/checkpoint schemas use; QKV rows are per head [q_h k_h v_h] (no GQA).
    /usr/bin/python3 scripts/reference/make_megatron_fixtures.py
"""
import argparse
import io
import json
import os
import random
import struct
from collections import OrderedDict

import numpy as np
import torch

L, H, A, FFN, POS, V, DIV = 2, 8, 2, 32, 16, 50, 8
HD = H // A
OUT = "tests/fixtures/megatron"


def weights(L=L):
    """Global weights in Megatron's [out, in] layout; the word embedding has 64 rows
    (Megatron's padding for t=2; t=1 uses its first 56), padding rows non-zero."""
    g = torch.Generator().manual_seed(18 if L == 2 else 18 + L)

    def r(*shape, scale=0.02, base=0.0):
        w = base + scale * torch.randn(*shape, generator=g)
        return w.to(torch.bfloat16).to(torch.float32)

    w = {"wte": r(64, H), "wpe": r(POS, H), "lnf_w": r(H, base=1.0, scale=0.1), "lnf_b": r(H)}
    for i in range(L):
        w[f"{i}.ln1_w"], w[f"{i}.ln1_b"] = r(H, base=1.0, scale=0.1), r(H)
        w[f"{i}.qkv_w"], w[f"{i}.qkv_b"] = r(3 * H, H), r(3 * H)  # rows [a][q|k|v][hd]
        w[f"{i}.proj_w"], w[f"{i}.proj_b"] = r(H, H), r(H)
        w[f"{i}.ln2_w"], w[f"{i}.ln2_b"] = r(H, base=1.0, scale=0.1), r(H)
        w[f"{i}.fc1_w"], w[f"{i}.fc1_b"] = r(FFN, H), r(FFN)
        w[f"{i}.fc2_w"], w[f"{i}.fc2_b"] = r(H, FFN), r(H)
    return w


def args_for(t, p, padded, extra=None, L=L):
    a = argparse.Namespace(
        num_layers=L, hidden_size=H, ffn_hidden_size=FFN, num_attention_heads=A, kv_channels=HD,
        group_query_attention=False, num_query_groups=1, seq_length=POS,
        max_position_embeddings=POS, vocab_size=V, padded_vocab_size=padded,
        make_vocab_size_divisible_by=DIV, tokenizer_type="NullTokenizer",
        position_embedding_type="learned_absolute", add_position_embedding=True,
        normalization="LayerNorm", norm_epsilon=1e-5, add_bias_linear=True, swiglu=False,
        untie_embeddings_and_output_weights=False, apply_residual_connection_post_layernorm=False,
        init_method_std=0.02, hidden_dropout=0.0, attention_dropout=0.0, seed=1234,
        tensor_model_parallel_size=t, pipeline_model_parallel_size=p,
        virtual_pipeline_model_parallel_size=None, micro_batch_size=1, global_batch_size=8,
        lr=1e-3, min_lr=0.0, lr_decay_style="linear", lr_warmup_iters=2, lr_decay_iters=20,
        train_iters=20, consumed_train_samples=40, params_dtype=torch.float32, bf16=False,
        transformer_impl="local", ckpt_format="torch", num_experts=None, data_path=None)
    for k, v in (extra or {}).items():
        setattr(a, k, v)
    return a


def core_names(w, i):
    return [("input_layernorm.weight", w[f"{i}.ln1_w"], None), ("input_layernorm.bias", w[f"{i}.ln1_b"], None),
            ("self_attention.linear_qkv.weight", w[f"{i}.qkv_w"], 0), ("self_attention.linear_qkv.bias", w[f"{i}.qkv_b"], 0),
            ("self_attention.linear_proj.weight", w[f"{i}.proj_w"], 1), ("self_attention.linear_proj.bias", w[f"{i}.proj_b"], None),
            ("pre_mlp_layernorm.weight", w[f"{i}.ln2_w"], None), ("pre_mlp_layernorm.bias", w[f"{i}.ln2_b"], None),
            ("mlp.linear_fc1.weight", w[f"{i}.fc1_w"], 0), ("mlp.linear_fc1.bias", w[f"{i}.fc1_b"], 0),
            ("mlp.linear_fc2.weight", w[f"{i}.fc2_w"], 1), ("mlp.linear_fc2.bias", w[f"{i}.fc2_b"], None)]


TE = {"input_layernorm.weight": "self_attention.linear_qkv.layer_norm_weight",
      "input_layernorm.bias": "self_attention.linear_qkv.layer_norm_bias",
      "pre_mlp_layernorm.weight": "mlp.linear_fc1.layer_norm_weight",
      "pre_mlp_layernorm.bias": "mlp.linear_fc1.layer_norm_bias"}
LEGACY = {"self_attention.linear_qkv": "self_attention.query_key_value",
          "self_attention.linear_proj": "self_attention.dense", "pre_mlp_layernorm": "post_attention_layernorm",
          "mlp.linear_fc1": "mlp.dense_h_to_4h", "mlp.linear_fc2": "mlp.dense_4h_to_h"}


def split(x, dim, t, tp):
    if dim is None:
        return x.clone()
    n = x.shape[dim] // t
    return x.narrow(dim, tp * n, n).clone()


def stage_dict(w, t, tp, p, pp, style, dtype, L=L, v=1, c=0):
    """One model chunk's state dict (Megatron-Core flat names, or legacy nested dicts):
    chunk c of pipeline rank pp is virtual stage c*p + pp."""
    padded = (V + DIV * t - 1) // (DIV * t) * (DIV * t)
    wte = split(w["wte"][:padded], 0, t, tp)
    per, stage, last = L // (p * v), c * p + pp, p * v - 1
    sd = OrderedDict()
    if stage == 0:
        sd["embedding.word_embeddings.weight"] = wte
        sd["embedding.position_embeddings.weight"] = w["wpe"].clone()
    for j in range(per):
        i = stage * per + j
        for name, x, dim in core_names(w, i):
            if style == "te":
                name = TE.get(name, name)
            sd[f"decoder.layers.{j}.{name}"] = split(x, dim, t, tp)
        if style == "te":
            sd[f"decoder.layers.{j}.self_attention.core_attention._extra_state"] = io.BytesIO()
            sd[f"decoder.layers.{j}.self_attention.linear_qkv._extra_state"] = io.BytesIO()
    if stage == last:
        sd["decoder.final_layernorm.weight"] = w["lnf_w"].clone()
        sd["decoder.final_layernorm.bias"] = w["lnf_b"].clone()
        if p > 1:  # Megatron-Core's last stage holds the tied output layer's copy
            sd["output_layer.weight"] = wte.clone()
    sd = OrderedDict((k, v.to(dtype) if torch.is_tensor(v) else v) for k, v in sd.items())
    if style != "legacy":
        return sd
    emb, enc = OrderedDict(), OrderedDict()
    for k, v in sd.items():
        if k.startswith("embedding."):
            part = k.split(".")[1]
            emb[part] = OrderedDict(weight=v)
        elif k.startswith("decoder."):
            k = k[len("decoder."):]
            for a, b in LEGACY.items():
                k = k.replace(a, b)
            enc[k] = v
    lm = OrderedDict()
    if emb:
        lm["embedding"] = emb
    lm["encoder"] = enc
    return OrderedDict(language_model=lm)


def save_megatron(w, name, t, p, style, dtype=torch.float32, release=False, real=False, L=L, v=1):
    padded = (V + DIV * t - 1) // (DIV * t) * (DIV * t)
    it = 20
    top = os.path.join(OUT, name)
    d = os.path.join(top, "release" if release else f"iter_{it:07d}")
    for pp in range(p):
        for tp in range(t):
            sub = f"mp_rank_{tp:02d}" if p == 1 else f"mp_rank_{tp:02d}_{pp:03d}"
            os.makedirs(os.path.join(d, sub), exist_ok=True)
            extra = {"virtual_pipeline_model_parallel_size": v} if v > 1 else None
            sd = {"args": args_for(t, p, padded, extra, L=L), "checkpoint_version": 3.0,
                  "iteration": it}
            if v == 1:
                sd["model"] = stage_dict(w, t, tp, p, pp, style, dtype, L=L)
            for c in range(v if v > 1 else 0):
                sd[f"model{c}"] = stage_dict(w, t, tp, p, pp, style, dtype, L=L, v=v, c=c)
            if real:  # what a real save holds beside the model: opaque objects to skip
                sd["optimizer"] = {"optimizer": {"state": {0: {"step": torch.tensor(20.0),
                                                               "exp_avg": torch.zeros(3)}},
                                                 "param_groups": [{"lr": 1e-3, "params": [0]}]},
                                   "fp32_from_fp16_params": [[torch.ones(2)]]}
                sd["opt_param_scheduler"] = {"max_lr": 1e-3, "num_steps": 160}
                random.seed(1)
                np.random.seed(1)
                torch.manual_seed(1)
                sd["rng_state"] = [{"random_rng_state": random.getstate(),
                                    "np_rng_state": np.random.get_state(),
                                    "torch_rng_state": torch.get_rng_state(),
                                    "rng_tracker_states": {}}]
                sd["num_floating_point_operations_so_far"] = 12345
            if release:  # release checkpoints carry no iteration
                del sd["iteration"]
            torch.save(sd, os.path.join(d, sub, "model_optim_rng.pt"))
    with open(os.path.join(top, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("release" if release else str(it))


def save_hf(w, path, L=L):
    """Hugging Face GPT-2 names, [in, out] weights, c_attn columns [q|k|v][a][hd]."""
    def qkv_cols(x):  # rows [a][3][hd] -> [3][a][hd]
        return x.reshape(A, 3, HD, *x.shape[1:]).transpose(0, 1).reshape(3 * H, *x.shape[1:])
    t = OrderedDict()
    t["transformer.wte.weight"] = w["wte"][:V]
    t["transformer.wpe.weight"] = w["wpe"]
    for i in range(L):
        p = f"transformer.h.{i}."
        t[p + "ln_1.weight"], t[p + "ln_1.bias"] = w[f"{i}.ln1_w"], w[f"{i}.ln1_b"]
        t[p + "attn.c_attn.weight"] = qkv_cols(w[f"{i}.qkv_w"]).t()
        t[p + "attn.c_attn.bias"] = qkv_cols(w[f"{i}.qkv_b"])
        t[p + "attn.c_proj.weight"], t[p + "attn.c_proj.bias"] = w[f"{i}.proj_w"].t(), w[f"{i}.proj_b"]
        t[p + "ln_2.weight"], t[p + "ln_2.bias"] = w[f"{i}.ln2_w"], w[f"{i}.ln2_b"]
        t[p + "mlp.c_fc.weight"], t[p + "mlp.c_fc.bias"] = w[f"{i}.fc1_w"].t(), w[f"{i}.fc1_b"]
        t[p + "mlp.c_proj.weight"], t[p + "mlp.c_proj.bias"] = w[f"{i}.fc2_w"].t(), w[f"{i}.fc2_b"]
    t["transformer.ln_f.weight"], t["transformer.ln_f.bias"] = w["lnf_w"], w["lnf_b"]
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for k, x in t.items():
        b = x.contiguous().numpy().astype("<f4").tobytes()
        header[k] = {"dtype": "F32", "shape": list(x.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    w = weights()
    os.makedirs(OUT, exist_ok=True)
    save_hf(w, os.path.join(OUT, "weights.safetensors"))
    save_megatron(w, "core_t1p1", 1, 1, "core", real=True)
    save_megatron(w, "core_t2p2", 2, 2, "core", dtype=torch.bfloat16)
    save_megatron(w, "te_t1p1", 1, 1, "te")
    save_megatron(w, "legacy_t2p1", 2, 1, "legacy", release=True)
    w4 = weights(L=4)
    save_hf(w4, os.path.join(OUT, "weights_l4.safetensors"), L=4)
    save_megatron(w4, "core_t1p2v2", 1, 2, "core", L=4, v=2)


if __name__ == "__main__":
    main()
