#!/usr/bin/python3
"""llama_reference.py - golden fixtures for ptdp's Llama-family blocks: a
plain-PyTorch model written out op by op as Hugging Face's LlamaForCausalLM
computes it (RMSNorm, rotary embeddings in Hugging Face's rotate-half
convention, grouped-query attention, SwiGLU MLP, no biases, untied output
layer), run in float32 with a float64 shadow to measure the drift.

It writes tests/fixtures/llama_a.safetensors (initial weights under Hugging
Face's Llama names, then the ref.* tensors of gpt_reference.py: tokens,
logits, loss, every gradient of 10 AdamW iterations, losses, gradient norms,
final weights) and llama_a.config.json beside it (a LlamaForCausalLM
config.json, so the weights load as a Hugging Face checkpoint). See
scripts/reference/README.md.

Run once by a developer, never by CI:
    /usr/bin/python3 scripts/reference/llama_reference.py --out tests/fixtures
"""
import argparse
import json
import math
import os

import torch
import torch.nn.functional as F

from gpt_reference import elemrel, maxrel, write_safetensors

CONFIGS = {
    # 4 query heads over 2 key/value groups (hd 8), SwiGLU width 48 (splits
    # over t = 2), an odd vocabulary; two micro-batches per iteration
    "a": dict(n_layer=2, hidden_size=32, n_head=4, n_kv_groups=2, ffn_hidden_size=48,
              vocab_size=131, seq_length=16, micro_batch_size=2, global_batch_size=4,
              rope_theta=10000.0, rms_norm_eps=1e-5, clip_grad=1.1),
}
ITERS = 10
LR, BETA1, BETA2, EPS, WD = 1e-3, 0.9, 0.95, 1e-8, 0.1
SEED = 1234          # weights
TOKEN_SEED = 4321    # tokens


def param_specs(c):
    """(HF name, shape, kind) in the order they are written. kind: 'mat'
    (normal 0.02, decayed) or 'norm' (1 + normal 0.1, not decayed).
    Projections are stored [out, in] (torch.nn.Linear's layout)."""
    h, V, f = c["hidden_size"], c["vocab_size"], c["ffn_hidden_size"]
    hd = h // c["n_head"]
    kv = c["n_kv_groups"] * hd
    specs = [("model.embed_tokens.weight", [V, h], "mat")]
    for i in range(c["n_layer"]):
        p = "model.layers.%d." % i
        specs += [(p + "input_layernorm.weight", [h], "norm"),
                  (p + "self_attn.q_proj.weight", [h, h], "mat"),
                  (p + "self_attn.k_proj.weight", [kv, h], "mat"),
                  (p + "self_attn.v_proj.weight", [kv, h], "mat"),
                  (p + "self_attn.o_proj.weight", [h, h], "mat"),
                  (p + "post_attention_layernorm.weight", [h], "norm"),
                  (p + "mlp.gate_proj.weight", [f, h], "mat"),
                  (p + "mlp.up_proj.weight", [f, h], "mat"),
                  (p + "mlp.down_proj.weight", [h, f], "mat")]
    specs += [("model.norm.weight", [h], "norm"), ("lm_head.weight", [V, h], "mat")]
    return specs


def init_params(c):
    torch.manual_seed(SEED)
    P = {}
    for name, shape, kind in param_specs(c):
        t = torch.randn(shape, dtype=torch.float32)
        P[name] = 1.0 + 0.1 * t if kind == "norm" else 0.02 * t
    return P


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    x1, x2 = x[..., :x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotary(s, hd, theta, dtype):
    """cos, sin [s, hd]: position i, frequency j of the first half and again
    of the second (Hugging Face's cat(freqs, freqs))."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    freqs = torch.outer(torch.arange(s, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def forward(P, c, idx):
    """idx [b, s] int64 -> logits [b, s, V]."""
    b, s = idx.shape
    h, a, g = c["hidden_size"], c["n_head"], c["n_kv_groups"]
    hd, eps = h // a, c["rms_norm_eps"]
    dtype = P["model.embed_tokens.weight"].dtype
    cos, sin = rotary(s, hd, c["rope_theta"], dtype)
    x = P["model.embed_tokens.weight"][idx]                                    # [b, s, h]
    mask = torch.tril(torch.ones(s, s, dtype=torch.bool))
    for i in range(c["n_layer"]):
        p = "model.layers.%d." % i
        y = rms_norm(x, P[p + "input_layernorm.weight"], eps)
        q = (y @ P[p + "self_attn.q_proj.weight"].t()).view(b, s, a, hd).transpose(1, 2)
        k = (y @ P[p + "self_attn.k_proj.weight"].t()).view(b, s, g, hd).transpose(1, 2)
        v = (y @ P[p + "self_attn.v_proj.weight"].t()).view(b, s, g, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin                                     # [b, a, s, hd]
        k = k * cos + rotate_half(k) * sin                                     # [b, g, s, hd]
        k = k.repeat_interleave(a // g, dim=1)   # query head j reads group j // (a/g)
        v = v.repeat_interleave(a // g, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, s, h)
        x = x + y @ P[p + "self_attn.o_proj.weight"].t()
        y = rms_norm(x, P[p + "post_attention_layernorm.weight"], eps)
        gate = y @ P[p + "mlp.gate_proj.weight"].t()
        up = y @ P[p + "mlp.up_proj.weight"].t()
        x = x + (F.silu(gate) * up) @ P[p + "mlp.down_proj.weight"].t()
    x = rms_norm(x, P["model.norm.weight"], eps)
    return x @ P["lm_head.weight"].t()                                          # untied


def loss_backward(P, c, batch):
    """As gpt_reference.py: each micro-batch back-propagates (sum of its token
    losses) / (B*s); returns the mean over the B*s tokens."""
    B, s, mb, V = c["global_batch_size"], c["seq_length"], c["micro_batch_size"], c["vocab_size"]
    total = 0.0
    for m in range(0, B, mb):
        inp, tgt = batch[m:m + mb, :s], batch[m:m + mb, 1:]
        l = F.cross_entropy(forward(P, c, inp).reshape(-1, V), tgt.reshape(-1), reduction="sum") / (B * s)
        l.backward()
        total += l.item()
    return total


def run(c, dtype):
    P0 = init_params(c)
    torch.manual_seed(TOKEN_SEED)
    B, s, V = c["global_batch_size"], c["seq_length"], c["vocab_size"]
    tokens = torch.randint(0, V, (ITERS, B, s + 1))
    P = {n: t.clone().to(dtype).requires_grad_(True) for n, t in P0.items()}
    out = {"init": P0, "tokens": tokens}
    with torch.no_grad():
        out["logits"] = forward(P, c, tokens[0, :, :s]).detach().clone()
    specs = param_specs(c)
    opt = torch.optim.AdamW([{"params": [P[n] for n, _, k in specs if k == "mat"], "weight_decay": WD},
                             {"params": [P[n] for n, _, k in specs if k != "mat"], "weight_decay": 0.0}],
                            lr=LR, betas=(BETA1, BETA2), eps=EPS)
    params = [P[n] for n, _, _ in specs]
    losses, norms, grads = [], [], []
    for it in range(ITERS):
        opt.zero_grad(set_to_none=False)
        loss = loss_backward(P, c, tokens[it])
        if it == 0:
            out["loss"] = loss
        grads.append({n: P[n].grad.detach().clone() for n in P})
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, c["clip_grad"])))
        losses.append(loss)
        opt.step()
    out["losses"], out["norms"] = losses, norms
    out["grads"] = grads[0]
    out["grads_all"] = {n: torch.stack([g[n] for g in grads]) for n in P}
    out["final"] = {n: P[n].detach().clone() for n in P}
    return out


def hf_config(c):
    """Hugging Face's config.json for LlamaForCausalLM of this shape."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "vocab_size": c["vocab_size"], "hidden_size": c["hidden_size"],
            "intermediate_size": c["ffn_hidden_size"], "num_hidden_layers": c["n_layer"],
            "num_attention_heads": c["n_head"], "num_key_value_heads": c["n_kv_groups"],
            "max_position_embeddings": c["seq_length"], "rms_norm_eps": c["rms_norm_eps"],
            "rope_theta": c["rope_theta"], "hidden_act": "silu", "attention_bias": False,
            "mlp_bias": False, "tie_word_embeddings": False, "torch_dtype": "float32"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures")
    args = ap.parse_args()
    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(1)  # deterministic reduction order
    os.makedirs(args.out, exist_ok=True)
    for key, c in CONFIGS.items():
        r32, r64 = run(c, torch.float32), run(c, torch.float64)
        names = [n for n, _, _ in param_specs(c)]
        err = {
            "loss": abs(r32["loss"] - r64["loss"]) / abs(r64["loss"]),
            "logits": maxrel(r32["logits"], r64["logits"]),
            "grads": max(maxrel(r32["grads"][n], r64["grads"][n]) for n in names),
            "grads_all_iters": max(maxrel(r32["grads_all"][n][i], r64["grads_all"][n][i])
                                   for n in names for i in range(ITERS)),
            "grads_elem": max(elemrel(r32["grads"][n], r64["grads"][n],
                                      1e-3 * r64["grads"][n].abs().max().item()) for n in names),
            "losses": max(abs(a - b) / abs(b) for a, b in zip(r32["losses"], r64["losses"])),
            "grad_norms": max(abs(a - b) / abs(b) for a, b in zip(r32["norms"], r64["norms"])),
            "final": max(maxrel(r32["final"][n], r64["final"][n]) for n in names),
            "final_abs": max((r32["final"][n].double() - r64["final"][n]).abs().max().item() for n in names),
        }
        print("config %s: %s" % (key, c))
        print("  losses     :", " ".join("%.6f" % x for x in r32["losses"]))
        print("  grad norms :", " ".join("%.6f" % x for x in r32["norms"]))
        print("  clip_grad %g: clipping active in %d of %d iterations" % (
            c["clip_grad"], sum(1 for x in r32["norms"] if x > c["clip_grad"]), ITERS))
        print("  fp32 vs fp64 max relative difference:")
        for k, v in err.items():
            print("    %-16s %.3e" % (k, v))

        meta = {"format": "pt"}
        for k, v in c.items():
            meta[k] = repr(v) if isinstance(v, float) else str(v)
        meta.update(lr=repr(LR), beta1=repr(BETA1), beta2=repr(BETA2), eps=repr(EPS),
                    weight_decay=repr(WD), iters=str(ITERS), seed=str(SEED),
                    token_seed=str(TOKEN_SEED), torch_version=torch.__version__)
        meta.update({"fp64_relerr_" + k: "%.3e" % v for k, v in err.items()})
        tensors = [(n, r32["init"][n]) for n in names]
        tensors.append(("ref.tokens", r32["tokens"].to(torch.int32)))
        tensors.append(("ref.logits", r32["logits"].float()))
        tensors.append(("ref.loss", torch.tensor([r32["loss"]], dtype=torch.float32)))
        tensors += [("ref.grads." + n, r32["grads_all"][n]) for n in names]
        tensors.append(("ref.losses", torch.tensor(r32["losses"], dtype=torch.float32)))
        tensors.append(("ref.grad_norms", torch.tensor(r32["norms"], dtype=torch.float32)))
        tensors += [("ref.final." + n, r32["final"][n]) for n in names]
        path = os.path.join(args.out, "llama_%s.safetensors" % key)
        write_safetensors(path, tensors, meta)
        cfg_path = os.path.join(args.out, "llama_%s.config.json" % key)
        with open(cfg_path, "w") as f:
            json.dump(hf_config(c), f, indent=2, sort_keys=True)
            f.write("\n")
        print("  wrote %s (%d bytes) and %s" % (path, os.path.getsize(path), cfg_path))


if __name__ == "__main__":
    main()
