"""optimizer.step() under fastdyn (issue 22): SGD with momentum, Adam and AdamW over the
parameters of two models, eager against fastdyn and torch.compile, one process.

    python3 bench/optimizer_step.py [--rounds 15] [--skip-inductor] [--device cuda] [--only TEXT]

Models: an MLP of 4 linear layers 512x512 (8 parameters, 1.05M values), and a stack of 48
linear layers 64x64 (96 small parameters: per-op overhead dominates). Each mode steps its own
copy of the same parameters with the same gradients (set once; the step does not depend on a
backward). Optimizers: torch's default on CPU, the single-tensor loop, "(foreach)": the
multi-tensor implementation over torch._foreach_* ops, CUDA's default, and "(fused)": fused=True,
one ATen op over every parameter (torch._fused_adam_ and friends). Modes: eager
(`opt.step()` as written); fastdyn (`opt.step()` under `fastdyn.enable()`: the step is traced into
one graph of in-place updates, compiled natively); inductor (`torch.compile` of a function
calling `opt.step()`, as PyTorch's docs show). First step and second step: wall time of each
(the first runs as written while it makes the optimizer's state; fastdyn traces at the second).
Steady state: the modes interleaved in rounds of 20 steps each (this VM's memory bandwidth
differs between processes), the median per step (on a GPU: synchronized around each round). max |diff|: largest difference of any
parameter from eager's after all steps (Adam's bias corrections are float32 tensors on every
compiler's path, Python floats in eager's: a few ulp).
"""
import argparse
import copy
import statistics
import time

import torch

import fastdyn


def models(device):
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)])
    small = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(48)])
    return {"MLP 4x512": mlp.to(device), "48 x Linear(64)": small.to(device)}


def make_opt(name, params):
    foreach = name.endswith("(foreach)")  # the multi-tensor implementation, CUDA's default
    fused = True if name.endswith("(fused)") else None  # one ATen op over every parameter
    if name.startswith("SGD momentum"):
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, foreach=foreach, fused=fused)
    if name.startswith("AdamW"):
        return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, foreach=foreach, fused=fused)
    return torch.optim.Adam(params, lr=1e-3, foreach=foreach, fused=fused)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--skip-inductor", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--only", default="", help="run the cases whose 'model / optimizer' contains this text")
    args = ap.parse_args()
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    torch.set_num_threads(2)
    where = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"torch {torch.__version__}, {where}")
    print("| model | optimizer | eager ms/step | fastdyn | inductor | 1st/2nd step fastdyn (ms) | 1st/2nd step inductor (ms) | max abs diff fastdyn / inductor |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for mname, model in models(dev).items():
        for oname in ("SGD momentum", "Adam", "AdamW", "SGD momentum (foreach)", "Adam (foreach)", "AdamW (foreach)",
                      "SGD momentum (fused)", "Adam (fused)", "AdamW (fused)"):
            if args.only not in f"{mname} / {oname}":
                continue
            modes = ["eager", "fastdyn"] + ([] if args.skip_inductor else ["inductor"])
            fastdyn.reset()  # each case a program of its own: one optimizer
            state = {}
            for m in modes:
                params = [p.detach().clone().requires_grad_(True) for p in model.parameters()]
                g = torch.Generator().manual_seed(1)
                for p in params:
                    p.grad = (torch.randn(p.shape, generator=g) * 0.01).to(dev)
                opt = make_opt(oname, params)
                if m == "eager":
                    step = opt.step
                elif m == "fastdyn":
                    def step(opt=opt):
                        fastdyn.enable()
                        try:
                            opt.step()
                        finally:
                            fastdyn.disable()
                else:
                    torch._dynamo.reset()
                    step = torch.compile(lambda opt=opt: opt.step())
                firsts = []
                for _ in range(2):
                    sync()
                    t = time.perf_counter()
                    step()
                    sync()
                    firsts.append((time.perf_counter() - t) * 1e3)
                fastdyn.synchronize()
                state[m] = dict(params=params, step=step, firsts=firsts, samples=[])
            for _ in range(args.rounds):
                for m in modes:
                    s = state[m]
                    sync()
                    t = time.perf_counter()
                    for _ in range(20):
                        s["step"]()
                    sync()
                    s["samples"].append((time.perf_counter() - t) / 20 * 1e3)
            med = {m: statistics.median(state[m]["samples"]) for m in modes}
            ref = state["eager"]["params"]

            def diff(m):
                if m not in state:
                    return "-"
                return f"{max((a - b).abs().max().item() for a, b in zip(ref, state[m]['params'])):.1e}"

            ind = f"{med['eager'] / med['inductor']:.2f}x" if "inductor" in med else "-"
            ind_first = "/".join(f"{x:.0f}" for x in state["inductor"]["firsts"]) if "inductor" in state else "-"
            print(f"| {mname} | {oname} | {med['eager']:.3f} | **{med['eager'] / med['fastdyn']:.2f}x** | {ind} | "
                  f"{'/'.join(f'{x:.1f}' for x in state['fastdyn']['firsts'])} | {ind_first} | {diff('fastdyn')} / {diff('inductor')} |", flush=True)


if __name__ == "__main__":
    main()
