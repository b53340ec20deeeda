"""The points a row's whole vectors leave over (issue 19): in a row of symbolic length, one masked
vector step of the row's own code (the default) against the scalar tail the emitter wrote before
(FASTDYN_MASKED_TAIL=0), and both against the kernel compiled with static sizes (whose row keeps
its scalar tail: a static row's code is unchanged), at row lengths that leave a remainder.

    python3 bench/row_remainder.py [--quick]

Everything runs in one process, interleaved (this VM's speed differs between processes):
compile: the first call of a fresh function (a new constant, so no kernel comes from a cache),
  compiling on the calling thread; min over rounds, the four fastdyn modes interleaved.
per call: the median over interleaved rounds of steady-state calls, for the four fastdyn modes,
  eager and torch.compile (dynamic=False, compiled before timing).
"""
import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

SRC = {
    "pointwise": "lambda x: ((x * 2 + K).sin() * x).relu() - 0.5",
    "sum": "lambda x: (x * K).sum(-1) + x.amax(-1)",
    "softmax_ln": "lambda x: torch.softmax(F.layer_norm(x, (x.shape[-1],)) * K, dim=-1)",
}
SHAPES = {
    "pointwise": [(37, 101), (1003, 1001)],
    "sum": [(256, 100), (64, 1000)],
    "softmax_ln": [(256, 100), (64, 1000)],
}
MODES = [("static", False, True), ("symbolic", True, True), ("symbolic", True, False)]


def label(dynamic, masked):
    return "static" if not dynamic else "symbolic" + (" masked" if masked else " scalar tail")


def make(case, k):
    return eval(SRC[case].replace("K", repr(k)), {"torch": torch, "F": F})


def first_call(run, masked, x):
    old = os.environ.get("FASTDYN_MASKED_TAIL")
    os.environ["FASTDYN_MASKED_TAIL"] = "1" if masked else "0"
    try:
        t = time.perf_counter()
        out = run(x)
        return out, time.perf_counter() - t
    finally:
        if old is None:
            del os.environ["FASTDYN_MASKED_TAIL"]
        else:
            os.environ["FASTDYN_MASKED_TAIL"] = old


def per_call(fns, x, rounds, calls):
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            for _ in range(calls):
                fn(x)
            times[name].append((time.perf_counter() - t) / calls)
    return {name: statistics.median(v) for name, v in times.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer rounds, no torch.compile")
    args = ap.parse_args()
    import random
    os.environ["FASTDYN_CACHE_DIR"] = "off"  # compiles, not the disk cache of an earlier run
    import fastdyn
    torch.set_num_threads(2)
    fastdyn.set_background_compile(False)
    fastdyn.set_recompile_limit(1000)
    compile_rounds = 3 if args.quick else 7
    rounds = 5 if args.quick else 11
    k = 1.0 + random.random()
    print("| case | shape | " + " | ".join(f"compile {label(d, m)} (ms)" for _, d, m in MODES) + " |")
    print("|---|---|" + "---:|" * len(MODES))
    runs = {}
    for case, shapes in SHAPES.items():
        for shape in shapes:
            x = torch.randn(*shape)
            best = {i: float("inf") for i in range(len(MODES))}
            for _ in range(compile_rounds):
                for i, (_, dynamic, masked) in enumerate(MODES):
                    k += 1e-3
                    fn = make(case, k)
                    run = fastdyn.jit(fn, dynamic=dynamic)
                    out, t = first_call(run, masked, x)
                    torch.testing.assert_close(out, fn(x), rtol=1e-4, atol=1e-4)
                    best[i] = min(best[i], t)
                    runs[(case, shape, i)] = (run, fn)
            print(f"| {case} | {tuple(shape)} | " + " | ".join(f"{best[i] * 1e3:.1f}" for i in range(len(MODES))) + " |", flush=True)
    print()
    print("| case | shape | eager (us) | " + ("" if args.quick else "torch.compile | ") +
          " | ".join(label(d, m) for _, d, m in MODES) + " | static / symbolic masked time |")
    print("|---|---|---:|" + ("" if args.quick else "---:|") + "---:|" * len(MODES) + "---:|")
    for case, shapes in SHAPES.items():
        for shape in shapes:
            x = torch.randn(*shape)
            fn = runs[(case, shape, 0)][1]
            fns = {"eager": fn}
            if not args.quick:
                tc = torch.compile(fn, dynamic=False)
                tc(x)
                fns["inductor"] = tc
            for i in range(len(MODES)):
                run, own = runs[(case, shape, i)]
                fns[i] = run
                torch.testing.assert_close(run(x), own(x), rtol=1e-4, atol=1e-4)
            big = x.numel() > 1 << 18
            med = per_call(fns, x, rounds, 20 if big else 200)
            cells = [f"{med['eager'] * 1e6:.1f}"]
            if not args.quick:
                cells.append(f"{med['eager'] / med['inductor']:.2f}x")
            cells += [f"{med['eager'] / med[i]:.2f}x" for i in range(len(MODES))]
            cells.append(f"{med[0] / med[1]:.2f}")
            print(f"| {case} | {tuple(shape)} | " + " | ".join(cells) + " |", flush=True)
    print("\n(speed-ups over eager's per-call time; the last column above 1.00 means the symbolic masked kernel is faster than the static one)")


if __name__ == "__main__":
    main()
