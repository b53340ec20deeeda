#!/usr/bin/env python3
"""Training steps (issue 22): eager, torch.compile and fastdyn, interleaved in one process.

    python3 bench/train_step.py [--quick] [--cases mlp,gpt2,resnet18] [--rounds 15] [--device cuda]

On a GPU the cases are GPU-sized (SIZES below) and steps are timed with a synchronize around them.

A step is forward (the compiled model), loss, backward and the optimizer's step; fastdyn.jit and
torch.compile wrap the model, so the backward is the compiled one. The optimizer's step is
compiled too (--optimizer compiled, the default: fastdyn runs `opt.step()` under enable(),
inductor is torch.compile of a function calling it, as PyTorch's docs show) or runs as written in
every mode (--optimizer as-written). Each mode trains its own copy of the model from the same weights on the
same batches, and the losses are compared with eager's step by step. Also: inference of the same
GPT-2 with grad mode left on, against inference under torch.no_grad() (the autograd node that is
never used must cost next to nothing).

Per case and mode: the median step time over interleaved rounds (steady state, one process: this
machine's memory bandwidth differs between processes), the first step in this process (the
compile included; the first mode to run also pays PyTorch's lazy start-up, so eager runs first),
and the largest loss difference from eager.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

# Cold first steps: empty compile caches for both compilers (inductor's FX graph cache and
# fastdyn's kernel cache would otherwise serve a second run from disk).
_cache = tempfile.mkdtemp(prefix="train_step_")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_cache, "inductor"))
os.environ.setdefault("FASTDYN_CACHE_DIR", os.path.join(_cache, "fastdyn"))

import torch
import torch.nn as nn
import torch.nn.functional as F

import fastdyn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "python"))
from cpu_memory import peak_bytes  # noqa: E402


# (CPU, GPU) sizes per case.
SIZES = {"mlp": ({"width": 512, "batch": 64}, {"width": 2048, "batch": 1024}),
         "gpt2": ({"embd": 128, "heads": 4, "tokens": 128, "batch": 1}, {"embd": 768, "heads": 12, "tokens": 512, "batch": 4}),
         "resnet18": ({"batch": 2, "size": 64}, {"batch": 32, "size": 224})}
DEVICE = "cpu"


def size(case):
    return SIZES[case][0 if DEVICE == "cpu" else 1]


class CrossEntropyOf(nn.Module):
    """A classifier's train-step loss: cross entropy of net(x) against the labels y."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x, y):
        return F.cross_entropy(self.net(x), y)


def make_mlp():
    torch.manual_seed(0)
    w, n = size("mlp")["width"], size("mlp")["batch"]
    layers = []
    for _ in range(4):
        layers += [nn.Linear(w, w), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(w, 10))
    batches = [(torch.randn(n, w), torch.randint(0, 10, (n,))) for _ in range(4)]
    return CrossEntropyOf(model), batches, lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9)


def make_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    # NB: dropout off, for one table on both machines: on a GPU, sdpa with dropout keeps ATen's autograd.
    z = size("gpt2")
    config = GPT2Config(n_layer=2, n_embd=z["embd"], n_head=z["heads"], vocab_size=1000, n_positions=z["tokens"],
                        bos_token_id=999, eos_token_id=999, use_cache=False, resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0)

    class WithLoss(nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = GPT2LMHeadModel(config)

        def forward(self, ids):
            return self.lm(ids, labels=ids).loss

    batches = [(torch.randint(0, 1000, (z["batch"], z["tokens"])),) for _ in range(4)]
    return WithLoss(), batches, lambda p: torch.optim.AdamW(p, lr=1e-4)


def make_resnet18():
    sys.path.insert(0, "bench")
    from cnn import ResNet18
    torch.manual_seed(0)
    net = ResNet18(classes=10)
    z = size("resnet18")
    batches = [(torch.randn(z["batch"], 3, z["size"], z["size"]), torch.randint(0, 10, (z["batch"],))) for _ in range(4)]
    return CrossEntropyOf(net), batches, lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9)


CASES = {"mlp": ("4x Linear(512) + ReLU, batch 64, cross entropy, SGD momentum", make_mlp),
         "gpt2": ("GPT-2 2 layers, n_embd 128, 128 tokens, LM loss, AdamW", make_gpt2),
         "resnet18": ("ResNet-18 (train-mode batch norm), 2x3x64x64, cross entropy, SGD momentum", make_resnet18)}
MODES = ["eager", "inductor", "fastdyn"]


def wrap(mode, model):
    if mode == "eager":
        return model
    if mode == "inductor":
        return torch.compile(model)
    return fastdyn.jit(model)


def sync():
    if DEVICE != "cpu":
        torch.cuda.synchronize()


OPTIMIZER = "compiled"  # or "as-written" (--optimizer)


def optimizer_step(mode, opt):
    if OPTIMIZER != "compiled" or mode == "eager":
        return opt.step
    if mode == "inductor":
        return torch.compile(lambda: opt.step())

    def step():
        fastdyn.enable()
        try:
            opt.step()
        finally:
            fastdyn.disable()
    return step


def train_case(name, rounds, steps_per_round):
    make = CASES[name][1]
    base, batches, make_opt = make()
    batches = [tuple(t.to(DEVICE) for t in b) for b in batches]
    state = {k: v.clone() for k, v in base.state_dict().items()}
    runs = {}
    for mode in MODES:
        model, _, _ = make()
        model.load_state_dict(state)
        model.to(DEVICE).train()
        opt = make_opt(model.parameters())
        runs[mode] = (wrap(mode, model), opt, model, optimizer_step(mode, opt))

    def step(mode, batch):
        fn, opt, _, opt_step = runs[mode]
        loss = fn(*batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt_step()
        return loss.detach()

    first, losses = {}, {m: [] for m in MODES}
    for mode in MODES:
        sync()
        t0 = time.perf_counter()
        losses[mode].append(step(mode, batches[0]))
        sync()
        first[mode] = time.perf_counter() - t0
    fastdyn.synchronize()  # kernels compiled in the background are in from here on
    for i in range(1, len(batches)):
        for mode in MODES:
            losses[mode].append(step(mode, batches[i]))
    # The optimizer's first step makes its state as written and the second is traced: its kernels
    # compile in the background during these steps, so wait for them again before timing.
    fastdyn.synchronize()
    times = {m: [] for m in MODES}
    for _ in range(rounds):
        for mode in MODES:
            sync()
            t0 = time.perf_counter()
            for k in range(steps_per_round):
                step(mode, batches[k % len(batches)])
            sync()
            times[mode].append((time.perf_counter() - t0) / steps_per_round)
    # The step's peak allocated memory above what was allocated before it, after the timed rounds.
    # On the CPU the profiler's allocation events give it; its observer is a guard, so the step's
    # frames compile again under it: a first profiled step compiles, the second is measured.
    peak = {}
    for mode in MODES:
        if DEVICE == "cpu":
            peak_bytes(lambda: step(mode, batches[0]))
            fastdyn.synchronize()
            peak[mode] = peak_bytes(lambda: step(mode, batches[0])) / 2**20
            continue
        sync()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        step(mode, batches[0])
        sync()
        peak[mode] = (torch.cuda.max_memory_allocated() - before) / 2**20
    compiled = getattr(runs["fastdyn"][0](*batches[0]).grad_fn, "name", lambda: "none")()
    out = {}
    for mode in MODES:
        diff = max(abs(float(a) - float(b)) for a, b in zip(losses[mode], losses["eager"]))
        out[mode] = {"step_ms": statistics.median(times[mode]) * 1e3, "first_ms": first[mode] * 1e3, "loss_diff": diff,
                     "peak_mib": peak[mode]}
    out["fastdyn"]["node"] = compiled
    return out


def inference_grad_mode(rounds):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=128, bos_token_id=999,
                        eos_token_id=999, use_cache=False)
    model = GPT2LMHeadModel(config).eval().to(DEVICE)
    ids = torch.randint(0, 1000, (1, 64), device=DEVICE)
    modes = {"eager": model, "inductor": torch.compile(model), "fastdyn": fastdyn.jit(model)}
    for m in modes.values():
        for grad in (False, True):
            with torch.set_grad_enabled(grad):
                m(ids)
    fastdyn.synchronize()
    times = {(m, g): [] for m in modes for g in (False, True)}
    for _ in range(rounds):
        for m, fn in modes.items():
            for grad in (False, True):
                with torch.set_grad_enabled(grad):
                    sync()
                    t0 = time.perf_counter()
                    for _ in range(10):
                        fn(ids)
                    sync()
                    times[(m, grad)].append((time.perf_counter() - t0) / 10)
    return {f"{m} {'grad' if g else 'no_grad'}": statistics.median(v) * 1e3 for (m, g), v in times.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--optimizer", choices=["compiled", "as-written"], default="compiled")
    a = ap.parse_args()
    global DEVICE, OPTIMIZER
    DEVICE = a.device
    OPTIMIZER = a.optimizer
    if DEVICE == "cpu":
        torch.set_num_threads(2)
    # One process trains three models with their own optimizers, and the CPU peaks run the steps
    # under the profiler: more entries of the optimizer's step wrapper than one program makes.
    fastdyn.set_recompile_limit(32)
    rounds = 3 if a.quick else a.rounds
    where = torch.cuda.get_device_name() if DEVICE != "cpu" else f"CPU, {torch.get_num_threads()} threads"
    print(f"torch {torch.__version__}, {where}; steady state interleaved in one process; optimizer {OPTIMIZER}")
    speedups = {m: [] for m in MODES}
    print("| case | mode | step (ms) | vs eager | first step (ms) | max loss diff | step peak (MiB) |")
    print("|---|---|---|---|---|---|---|")
    for name in a.cases.split(","):
        r = train_case(name, rounds, 3)
        for mode in MODES:
            v = r[mode]
            sp = r["eager"]["step_ms"] / v["step_ms"]
            speedups[mode].append(sp)
            print(f"| {name} | {mode} | {v['step_ms']:.2f} | {sp:.2f}x | {v['first_ms']:.0f} | {v['loss_diff']:.1e} | {v['peak_mib']:.0f} |"
                  + (f" node: {v['node']}" if "node" in v else ""), flush=True)
    for mode in MODES:
        g = 1.0
        for s in speedups[mode]:
            g *= s
        print(f"geomean {mode}: {g ** (1 / len(speedups[mode])):.2f}x")
    print("\nGPT-2 (2 layers, n_embd 128) inference, 64 tokens (ms per call):")
    for k, v in inference_grad_mode(rounds).items():
        print(f"  {k}: {v:.2f}")


if __name__ == "__main__":
    main()
