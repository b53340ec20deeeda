#!/usr/bin/env python3
"""Where a GPU train step's time goes (issue 22), eager against fastdyn: torch.profiler over a few
steady-state steps of bench/train_step.py's GPU-sized cases, the kernels by total CUDA time, their
count per step, and each step's CUDA total.

    python3 scripts/profile_train_gpu.py [--cases resnet18,gpt2,mlp] [--top 25]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import fastdyn  # noqa: E402
import train_step as ts  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="resnet18,gpt2,mlp")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    ts.DEVICE = "cuda"
    for case in args.cases.split(","):
        base, batches, make_opt = ts.CASES[case][1]()
        state = {k: v.clone() for k, v in base.state_dict().items()}
        batches = [tuple(t.cuda() for t in b) for b in batches]
        for mode in ("eager", "fastdyn"):
            model, _, _ = ts.CASES[case][1]()
            model.load_state_dict(state)
            model.cuda().train()
            opt = make_opt(model.parameters())
            fn = ts.wrap(mode, model)

            def step(i):
                loss = fn(*batches[i % len(batches)])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()

            for i in range(3):
                step(i)
            fastdyn.synchronize()
            for i in range(3):
                step(i)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for i in range(args.steps):
                    step(i)
                torch.cuda.synchronize()
            kernels = sorted(((e.key, e.self_device_time_total, e.count) for e in prof.key_averages()
                              if getattr(e, "self_device_time_total", 0) > 0), key=lambda r: -r[1])
            total = sum(t for _, t, _ in kernels) / args.steps
            count = sum(c for _, _, c in kernels) / args.steps
            print(f"\n=== {case} / {mode}: CUDA time per step {total / 1e3:.3f} ms, {count:.0f} kernels/copies per step")
            for name, t, c in kernels[:args.top]:
                print(f"  {t / args.steps / 1e3:8.3f} ms  x{c / args.steps:5.1f}  {name[:150]}")
        fastdyn.reset()


if __name__ == "__main__":
    main()
