#!/usr/bin/env python3
"""torch.autocast on the CPU (bfloat16): eager, torch.compile and fastdyn in one process.

    python3 bench/autocast.py [--rounds 7] [--skip-inductor]

Cases (random weights, 2 threads): a 4x512 MLP on a batch of 64 (inference, under torch.no_grad), GPT-2 2-layer
(hidden 128) on 128 tokens (inference, no cache), and one train step of the MLP (PyTorch's AMP
recipe: the forward and the loss in `torch.autocast`, entered by the step itself, backward outside).
The inference cases run inside `torch.autocast("cpu", dtype=torch.bfloat16)`; fastdyn is `fastdyn.jit(fn)` of the case's function, inductor
`torch.compile(fn)`. The modes are interleaved in one process (this VM's memory bandwidth differs
between processes): per round, 10 calls of each, the median round per call. Also: the first call
(compiles included) of each mode, graphs/breaks of fastdyn, and whether every output equals
eager's within bfloat16 tolerance (same dtype).
"""
import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(2)


def mlp_model():
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [nn.Linear(512, 512), nn.GELU()]
    return nn.Sequential(*layers)


def case_mlp():
    model = mlp_model().eval()
    x = torch.randn(64, 512)
    return model, (x,), False


def case_gpt2():
    import transformers
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000)).eval()
    ids = torch.randint(0, 1000, (1, 128))

    def fn(ids):
        return model(ids, use_cache=False).logits
    return fn, (ids,), False


def case_train():
    model = mlp_model()
    x, y = torch.randn(64, 512), torch.randn(64, 512)

    def fn(x, y):  # the AMP recipe: autocast around the forward and loss, backward outside
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(model(x).float(), y)
        loss.backward()
        return loss.detach(), model[0].weight.grad
    return fn, (x, y), True


CASES = {"mlp_4x512": case_mlp, "gpt2_2layer": case_gpt2, "mlp_train_step": case_train}


def close(a, b):
    a = a if isinstance(a, (tuple, list)) else (a,)
    b = b if isinstance(b, (tuple, list)) else (b,)
    return all(x.dtype == y.dtype and torch.allclose(x.float(), y.float(), rtol=3e-2, atol=3e-2) for x, y in zip(a, b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--skip-inductor", action="store_true")
    args = ap.parse_args()
    import fastdyn
    print("| case | eager µs | fastdyn | inductor | first call ms: fastdyn / inductor | fastdyn graphs / breaks | equal (fastdyn / inductor) |")
    print("|---|---:|---:|---:|---|---|---|")
    for name, make in CASES.items():
        fn, inputs, grad = make()
        modes = {"eager": fn, "fastdyn": fastdyn.jit(fn)}
        if not args.skip_inductor:
            torch._dynamo.reset()
            modes["inductor"] = torch.compile(fn)
        first, equal = {}, {}
        # Inference runs inside one autocast region; the train step enters its own each step (eager's
        # autocast caches weight casts within a region, across steps only if the region spans them).
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=not grad), torch.set_grad_enabled(grad):
            want = fn(*inputs)
            before = fastdyn.stats()
            for m, f in modes.items():
                t = time.perf_counter()
                out = f(*inputs)
                first[m] = (time.perf_counter() - t) * 1e3
                equal[m] = close(out, want)
            fastdyn.synchronize()
            after = fastdyn.stats()
            samples = {m: [] for m in modes}
            for _ in range(args.rounds):
                for m, f in modes.items():
                    t = time.perf_counter()
                    for _ in range(10):
                        f(*inputs)
                    samples[m].append((time.perf_counter() - t) / 10 * 1e6)
        med = {m: statistics.median(v) for m, v in samples.items()}
        ind = f"{med['eager'] / med['inductor']:.2f}x" if "inductor" in med else "-"
        ind_first = f"{first['inductor']:.0f}" if "inductor" in first else "-"
        print(f"| {name} | {med['eager']:.0f} | {med['eager'] / med['fastdyn']:.2f}x | {ind} | "
              f"{first['fastdyn']:.1f} / {ind_first} | {after['graphs'] - before['graphs']} / "
              f"{after['graph_breaks'] - before['graph_breaks']} | {equal['fastdyn']} / {equal.get('inductor', '-')} |",
              flush=True)


if __name__ == "__main__":
    main()
