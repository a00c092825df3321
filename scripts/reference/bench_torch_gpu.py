#!/usr/bin/env python3
"""bench_torch_gpu.py - PyTorch on the GPU machine, beside `ptdp train --device cuda`:
one training iteration (forward, backward, AdamW) of the GPT of bench_torch.py on
a GPT-2-124M shape (l=12 h=768 a=12 s=1024 V=50304), timed with CUDA events.
Modes: fp32 with TF32 off and the explicit attention (what ptdp's fp32 CUDA
backend computes), TF32 GEMMs with scaled_dot_product_attention, and PyTorch's usual
fast path (bf16 autocast, SDPA, fused AdamW). One JSON line per mode.
A developer tool for docs/gpu.md; needs PyTorch with CUDA, never run by CI.
    python3 scripts/reference/bench_torch_gpu.py --micro-batch 8
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_torch  # noqa: E402  (the model definition)


class SdpaBlock(bench_torch.Block):
    def forward(self, x, mask):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        q, k, v = (t.view(b, s, self.a, h // self.a).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, s, h))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


def run(mode, l, h, a, s, V, b, iters, warmup):
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = mode != "fp32"
    torch.backends.cudnn.allow_tf32 = mode != "fp32"
    model = bench_torch.GPT(l, h, a, s, V)
    if mode != "fp32":
        model.blocks = torch.nn.ModuleList(SdpaBlock(h, a) for _ in range(l))
    model = model.cuda()
    fused = mode == "bf16"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused)
    idx = torch.randint(0, V, (b, s + 1), device="cuda")
    times = []
    for it in range(warmup + iters):
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode == "bf16"):
            loss = model(idx[:, :s], idx[:, 1:])
        loss.backward()
        opt.step()
        t1.record()
        torch.cuda.synchronize()
        if it >= warmup:
            times.append(t0.elapsed_time(t1))
    times.sort()
    ms = times[len(times) // 2]
    flops = 72.0 * b * s * l * h * h * (1 + s / (6.0 * h) + V / (12.0 * l * h))  # logits: 6 b s h V
    print(json.dumps({"bench": "torch_gpu_train", "mode": mode, "torch": torch.__version__,
                      "gpu": torch.cuda.get_device_name(), "l": l, "h": h, "s": s, "b": b,
                      "ms_median": round(ms, 2), "tokens_per_s": round(b * s / (ms / 1e3), 1),
                      "model_tflops": round(flops / (ms / 1e3) / 1e12, 2),
                      "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}), flush=True)
    del model, opt
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--modes", nargs="+", default=["fp32", "tf32-sdpa", "bf16"])
    args = ap.parse_args()
    for mode in args.modes:
        run(mode, 12, 768, 12, 1024, 50304, args.micro_batch, args.iters, args.warmup)


if __name__ == "__main__":
    main()
