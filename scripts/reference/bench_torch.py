#!/usr/bin/python3
"""bench_torch.py - the PyTorch side of docs/performance.md's comparison: one
training iteration (forward, backward, AdamW) of the same GPT configurations
as bench/bench_train.c, written the usual way (nn.Linear, nn.LayerNorm,
tanh-GeLU, causal softmax attention, tied output layer, fp32), timed on this
machine in the same session as ptdp so the ratio is fair. Prints one JSON
line per config. A developer tool: needs Debian's python3-torch, never run by
CI.
    /usr/bin/python3 scripts/reference/bench_torch.py --config b c d --threads 2 [--bf16]
--bf16 runs the forward under torch.autocast("cpu", dtype=torch.bfloat16),
PyTorch's CPU mixed precision.
"""
import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = {  # l, h, a, s, b, V  (the same as bench/bench_train.c)
    "a": (2, 128, 4, 64, 8, 512),
    "b": (4, 256, 4, 128, 8, 8192),
    "c": (6, 384, 6, 256, 4, 50304),
    "d": (12, 768, 12, 1024, 1, 50304),
}


class Block(nn.Module):
    def __init__(self, h, a):
        super().__init__()
        self.a = a
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc, self.fc2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

    def forward(self, x, mask):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        q, k, v = (t.view(b, s, self.a, h // self.a).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(h // self.a))
        att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, s, h))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, l, h, a, s, V):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, h), nn.Embedding(s, h)
        self.blocks = nn.ModuleList(Block(h, a) for _ in range(l))
        self.lnf = nn.LayerNorm(h)
        self.register_buffer("mask", ~torch.tril(torch.ones(s, s, dtype=torch.bool)))

    def forward(self, idx, tgt):
        x = self.wte(idx) + self.wpe.weight[: idx.shape[1]]
        for blk in self.blocks:
            x = blk(x, self.mask)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", nargs="+", default=["b", "c", "d"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--bf16", action="store_true",
                    help="PyTorch's CPU mixed precision: torch.autocast('cpu', dtype=torch.bfloat16)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for name in args.config:
        l, h, a, s, b, V = CONFIGS[name]
        torch.manual_seed(0)
        model = GPT(l, h, a, s, V)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        idx = torch.randint(0, V, (b, s + 1))
        times = []
        for it in range(args.warmup + args.iters):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                loss = model(idx[:, :s], idx[:, 1:])
            loss.backward()
            opt.step()
            dt = time.perf_counter() - t0
            if it >= args.warmup:
                times.append(dt)
        times.sort()
        ms = times[len(times) // 2] * 1e3
        flops = 72.0 * b * s * l * h * h * (1 + s / (6.0 * h) + V / (12.0 * l * h))  # logits: 6 b s h V
        print(json.dumps({"bench": "torch_train", "config": name, "torch": torch.__version__,
                          "threads": args.threads, "precision": "bf16-autocast" if args.bf16 else "fp32",
                          "ms_median": round(ms, 2),
                          "ms_all": [round(t * 1e3, 2) for t in times],
                          "tokens_per_s": round(b * s / (ms / 1e3), 1),
                          "model_tflops": round(flops / (ms / 1e3) / 1e12, 4),
                          "env_OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", "")}), flush=True)


if __name__ == "__main__":
    main()
