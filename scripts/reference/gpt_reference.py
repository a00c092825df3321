#!/usr/bin/python3
"""gpt_reference.py - golden fixtures for ptdp's GPT tests, in the manner of
llm.c's test_gpt2: a plain-PyTorch GPT-2 (exactly Hugging Face's
GPT2LMHeadModel: learned token + position embeddings, pre-LN blocks, causal
multi-head attention, GELU tanh approximation, final LayerNorm, output layer
tied to wte, LayerNorm eps 1e-5, no dropout), run in float32, with a float64
shadow of the same computation to measure how far float32 drifts.

It writes tests/fixtures/gpt_a.safetensors and gpt_b.safetensors (see
scripts/reference/README.md for every tensor). It does not use the
transformers or safetensors packages: the model is written out below and the
files are written with json + struct.

Run once by a developer, never by CI:
    /usr/bin/python3 scripts/reference/gpt_reference.py --out tests/fixtures
"""
import argparse
import json
import math
import os
import struct

import torch
import torch.nn.functional as F

CONFIGS = {
    "a": dict(n_layer=2, n_embd=32, n_head=4, vocab_size=128, n_positions=16,
              seq_length=16, micro_batch_size=2, global_batch_size=4,
              clip_grad=1.0, write_final=True),
    "b": dict(n_layer=3, n_embd=48, n_head=3, vocab_size=201, n_positions=20,
              seq_length=12, micro_batch_size=3, global_batch_size=3,
              clip_grad=1.5, write_final=False),
}
ITERS = 10
LR, BETA1, BETA2, EPS, WD = 1e-3, 0.9, 0.95, 1e-8, 0.1
SEED = 1234          # weights
TOKEN_SEED = 4321    # tokens


def param_specs(c):
    """(HF name, shape, kind) in the order they are written. kind: 'mat'
    (normal 0.02, decayed), 'bias' (normal 0.02, not decayed), 'lnw'
    (1 + normal 0.1, not decayed), 'lnb' (normal 0.02, not decayed)."""
    h, V = c["n_embd"], c["vocab_size"]
    specs = [("transformer.wte.weight", [V, h], "mat"),
             ("transformer.wpe.weight", [c["n_positions"], h], "mat")]
    for i in range(c["n_layer"]):
        p = "transformer.h.%d." % i
        specs += [(p + "ln_1.weight", [h], "lnw"), (p + "ln_1.bias", [h], "lnb"),
                  (p + "attn.c_attn.weight", [h, 3 * h], "mat"), (p + "attn.c_attn.bias", [3 * h], "bias"),
                  (p + "attn.c_proj.weight", [h, h], "mat"), (p + "attn.c_proj.bias", [h], "bias"),
                  (p + "ln_2.weight", [h], "lnw"), (p + "ln_2.bias", [h], "lnb"),
                  (p + "mlp.c_fc.weight", [h, 4 * h], "mat"), (p + "mlp.c_fc.bias", [4 * h], "bias"),
                  (p + "mlp.c_proj.weight", [4 * h, h], "mat"), (p + "mlp.c_proj.bias", [h], "bias")]
    specs += [("transformer.ln_f.weight", [h], "lnw"), ("transformer.ln_f.bias", [h], "lnb")]
    return specs


def init_params(c):
    torch.manual_seed(SEED)
    P = {}
    for name, shape, kind in param_specs(c):
        if kind == "lnw":
            t = 1.0 + 0.1 * torch.randn(shape, dtype=torch.float32)
        else:
            t = 0.02 * torch.randn(shape, dtype=torch.float32)
        P[name] = t
    return P


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def forward(P, c, idx):
    """idx [b, s] int64 -> logits [b, s, V]."""
    b, s = idx.shape
    h, a = c["n_embd"], c["n_head"]
    hd = h // a
    x = P["transformer.wte.weight"][idx] + P["transformer.wpe.weight"][:s]      # [b, s, h]
    mask = torch.tril(torch.ones(s, s, dtype=torch.bool))
    for i in range(c["n_layer"]):
        p = "transformer.h.%d." % i
        y = F.layer_norm(x, (h,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], 1e-5)
        qkv = y @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"]        # [b, s, 3h]
        q, k, v = qkv.split(h, dim=2)                                           # Q | K | V columns
        q = q.view(b, s, a, hd).transpose(1, 2)                                 # [b, a, s, hd]
        k = k.view(b, s, a, hd).transpose(1, 2)
        v = v.view(b, s, a, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))                 # [b, a, s, s]
        att = att.masked_fill(~mask, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, s, h)                # heads back in column order
        y = y @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"]
        x = x + y
        y = F.layer_norm(x, (h,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], 1e-5)
        y = gelu_tanh(y @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"])    # [b, s, 4h]
        y = y @ P[p + "mlp.c_proj.weight"] + P[p + "mlp.c_proj.bias"]
        x = x + y
    x = F.layer_norm(x, (h,), P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], 1e-5)
    return x @ P["transformer.wte.weight"].t()                                  # tied output layer


def loss_backward(P, c, batch):
    """batch [B, s+1]. Gradient accumulation over micro-batches: each
    micro-batch backpropagates (sum of its token losses) / (B*s). Returns the
    loss (mean over the B*s tokens) as a Python float."""
    B, s, mb = c["global_batch_size"], c["seq_length"], c["micro_batch_size"]
    V = c["vocab_size"]
    total = 0.0
    for m in range(0, B, mb):
        inp, tgt = batch[m:m + mb, :s], batch[m:m + mb, 1:]
        logits = forward(P, c, inp)
        l = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1), reduction="sum") / (B * s)
        l.backward()
        total += l.item()
    return total


def make_optimizer(P, c):
    decay = [t for n, sh, k in param_specs(c) if k == "mat" for t in [P[n]]]
    nodecay = [t for n, sh, k in param_specs(c) if k != "mat" for t in [P[n]]]
    return torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                              {"params": nodecay, "weight_decay": 0.0}],
                             lr=LR, betas=(BETA1, BETA2), eps=EPS)


def run(c, dtype):
    """Everything the fixture records, computed in `dtype` from the same
    (float32-valued) initial weights and tokens."""
    P0 = init_params(c)
    torch.manual_seed(TOKEN_SEED)
    B, s, V = c["global_batch_size"], c["seq_length"], c["vocab_size"]
    tokens = torch.randint(0, V, (ITERS, B, s + 1))
    P = {n: t.clone().to(dtype).requires_grad_(True) for n, t in P0.items()}
    out = {"init": P0, "tokens": tokens}
    with torch.no_grad():
        out["logits"] = forward(P, c, tokens[0, :, :s]).detach().clone()
    opt = make_optimizer(P, c)
    params = [P[n] for n, _, _ in param_specs(c)]
    losses, norms, grads = [], [], []
    for it in range(ITERS):
        opt.zero_grad(set_to_none=False)
        loss = loss_backward(P, c, tokens[it])
        if it == 0:
            out["loss"] = loss
        grads.append({n: P[n].grad.detach().clone() for n in P})
        norm = torch.nn.utils.clip_grad_norm_(params, c["clip_grad"])
        losses.append(loss)
        norms.append(float(norm))
        opt.step()
    out["losses"], out["norms"] = losses, norms
    out["grads"] = grads[0]
    # every iteration's gradients (before clipping), stacked: [ITERS, *shape]
    out["grads_all"] = {n: torch.stack([g[n] for g in grads]) for n in P}
    out["final"] = {n: P[n].detach().clone() for n in P}
    return out


def maxrel(x32, x64):
    """Normwise: max |x32 - x64| / max |x64| (over one tensor)."""
    x32, x64 = torch.as_tensor(x32, dtype=torch.float64), torch.as_tensor(x64, dtype=torch.float64)
    den = x64.abs().max().item()
    return (x32 - x64).abs().max().item() / (den if den > 0 else 1.0)


def elemrel(x32, x64, floor):
    """Elementwise: max |x32 - x64| / max(|x64|, floor)."""
    x32, x64 = torch.as_tensor(x32, dtype=torch.float64), torch.as_tensor(x64, dtype=torch.float64)
    return ((x32 - x64).abs() / x64.abs().clamp(min=floor)).max().item()


DTYPES = {torch.float32: "F32", torch.int32: "I32"}


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, tensor) in order; metadata: str -> str."""
    header = {"__metadata__": metadata}
    blobs, off = [], 0
    for name, t in tensors:
        t = t.contiguous()
        data = t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)
    tmp = path + ".tmp.%d" % os.getpid()
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for d in blobs:
            f.write(d)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--only", choices=sorted(CONFIGS), default=None)
    args = ap.parse_args()
    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(1)  # deterministic reduction order
    os.makedirs(args.out, exist_ok=True)
    for key, c in CONFIGS.items():
        if args.only and key != args.only:
            continue
        assert c["n_embd"] % c["n_head"] == 0 and c["global_batch_size"] % c["micro_batch_size"] == 0
        r32 = run(c, torch.float32)
        r64 = run(c, torch.float64)
        names = [n for n, _, _ in param_specs(c)]
        err = {
            "loss": abs(r32["loss"] - r64["loss"]) / abs(r64["loss"]),
            "logits": maxrel(r32["logits"], r64["logits"]),
            "logits_elem": elemrel(r32["logits"], r64["logits"], 1e-3),
            "logits_abs": (r32["logits"].double() - r64["logits"]).abs().max().item(),
            "grads": max(maxrel(r32["grads"][n], r64["grads"][n]) for n in names),
            "grads_all_iters": max(maxrel(r32["grads_all"][n][i], r64["grads_all"][n][i])
                                   for n in names for i in range(ITERS)),
            "grads_elem": max(elemrel(r32["grads"][n], r64["grads"][n],
                                      1e-3 * r64["grads"][n].abs().max().item()) for n in names),
            "grads_abs": max((r32["grads"][n].double() - r64["grads"][n]).abs().max().item() for n in names),
            "losses": max(abs(a - b) / abs(b) for a, b in zip(r32["losses"], r64["losses"])),
            "grad_norms": max(abs(a - b) / abs(b) for a, b in zip(r32["norms"], r64["norms"])),
            "final": max(maxrel(r32["final"][n], r64["final"][n]) for n in names),
            "final_abs": max((r32["final"][n].double() - r64["final"][n]).abs().max().item() for n in names),
        }
        worst = max(names, key=lambda n: maxrel(r32["grads"][n], r64["grads"][n]))
        print("config %s: %s" % (key, {k: v for k, v in c.items()}))
        print("  losses     :", " ".join("%.6f" % x for x in r32["losses"]))
        print("  grad norms :", " ".join("%.6f" % x for x in r32["norms"]))
        clipped = sum(1 for x in r32["norms"] if x > c["clip_grad"])
        print("  clip_grad %g: clipping active in %d of %d iterations" % (c["clip_grad"], clipped, ITERS))
        print("  fp32 vs fp64 max relative difference:")
        for k, v in err.items():
            print("    %-12s %.3e" % (k, v))
        print("    (worst gradient tensor: %s)" % worst)
        print("  magnitudes: max|logits| %.3e, max|grad| %.3e, min over tensors of max|grad| %.3e" % (
            r64["logits"].abs().max().item(), max(r64["grads"][n].abs().max().item() for n in names),
            min(r64["grads"][n].abs().max().item() for n in names)))

        meta = {"format": "pt"}
        for k in ["n_layer", "n_embd", "n_head", "vocab_size", "n_positions", "seq_length",
                  "micro_batch_size", "global_batch_size"]:
            meta[k] = str(c[k])
        meta.update(lr=repr(LR), beta1=repr(BETA1), beta2=repr(BETA2), eps=repr(EPS),
                    weight_decay=repr(WD), clip_grad=repr(c["clip_grad"]), iters=str(ITERS),
                    seed=str(SEED), token_seed=str(TOKEN_SEED), torch_version=torch.__version__,
                    fp64_relerr_loss="%.3e" % err["loss"], fp64_relerr_logits="%.3e" % err["logits"],
                    fp64_relerr_grads="%.3e" % err["grads"],
                    fp64_relerr_grads_all_iters="%.3e" % err["grads_all_iters"], fp64_relerr_losses="%.3e" % err["losses"],
                    fp64_relerr_grad_norms="%.3e" % err["grad_norms"],
                    fp64_relerr_final="%.3e" % err["final"])
        tensors = [(n, r32["init"][n]) for n in names]
        tensors.append(("ref.tokens", r32["tokens"].to(torch.int32)))
        tensors.append(("ref.logits", r32["logits"].float()))
        tensors.append(("ref.loss", torch.tensor([r32["loss"]], dtype=torch.float32)))
        tensors += [("ref.grads." + n, r32["grads_all"][n]) for n in names]
        tensors.append(("ref.losses", torch.tensor(r32["losses"], dtype=torch.float32)))
        tensors.append(("ref.grad_norms", torch.tensor(r32["norms"], dtype=torch.float32)))
        if c["write_final"]:
            tensors += [("ref.final." + n, r32["final"][n]) for n in names]
        path = os.path.join(args.out, "gpt_%s.safetensors" % key)
        write_safetensors(path, tensors, meta)
        print("  wrote %s (%d bytes)" % (path, os.path.getsize(path)))


if __name__ == "__main__":
    main()
