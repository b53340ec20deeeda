"""Per-frame cost of the PEP 523 hook on code it leaves alone: eager vs fastdyn.enable() vs
torch.compile (Dynamo's hook), each in its own process, interleaved.

    python3 bench/hook_overhead.py [--runs 5] [--calls 1000000]

The workload is a loop calling a one-line Python function (no tensors), so every call is one
frame the hook sees and hands to CPython's evaluator. With any PEP 523 hook set, CPython 3.11
stops inlining Python-to-Python calls, so some cost is CPython's own: the lower bound is what a
hook that does nothing costs, which this bench cannot load (it would need its own extension);
fastdyn's README gives the number measured once.
"""
import argparse
import statistics
import subprocess
import sys
import time

CHILD = r"""
import sys, time
import torch  # every mode imports torch: the same process state

def leaf(a):
    return a

def loop(n):
    s = 0
    for i in range(n):
        s += leaf(i)
    return s

mode, calls = sys.argv[1], int(sys.argv[2])
if mode == "fastdyn":
    import fastdyn
    fastdyn.enable()
elif mode == "inductor":
    loop = torch.compile(loop)  # Dynamo finds no tensors in loop; its hook still sees every leaf frame
loop(1000)
best = float("inf")
for _ in range(7):
    t = time.perf_counter_ns()
    loop(calls)
    best = min(best, time.perf_counter_ns() - t)
print(best / calls)
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--calls", type=int, default=1_000_000)
    args = ap.parse_args()
    modes = ("eager", "fastdyn", "inductor")
    res = {m: [] for m in modes}
    for _ in range(args.runs):
        for m in modes:
            out = subprocess.run([sys.executable, "-c", CHILD, m, str(args.calls)], check=True,
                                 capture_output=True, text=True).stdout
            res[m].append(float(out.split()[-1]))
    eager = statistics.median(res["eager"])
    print(f"{'mode':<10} {'ns per call (median of best-of-7)':>34} {'over eager':>12}")
    for m in modes:
        med = statistics.median(res[m])
        print(f"{m:<10} {med:>34.1f} {med - eager:>+11.1f}")


if __name__ == "__main__":
    main()
