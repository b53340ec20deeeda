"""Varying shapes (issue 19's targets): one function called with 100 distinct lengths, under
eager, torch.compile (dynamic=None: static first, then automatic dynamic) and fastdyn, each mode
in its own fresh process.

    python3 bench/dynamic_shapes.py [--lengths 100] [--cases pointwise,reduction,softmax_ln]

Per (case, mode) it reports:
  sweep s      wall time of one call at each of the lengths, in a shuffled order (fixed seed),
               compiles included: what a user with varying batch or sequence sizes waits;
  compiles     graphs compiled during the sweep (fastdyn: frames_compiled; inductor: Dynamo's
               unique graphs, from torch._dynamo.utils.counters); for fastdyn, "+N sizes": the
               sizes its dynamic entry specialised its kernels to (stats' sizes_compiled);
  per call us  after the sweep, the median time of a call at three of the lengths (small, middle,
               large), 200 calls each: whether those lengths run compiled or fell back to eager;
  static us    the same three lengths in a process that compiled only that length (fastdyn and
               inductor; the target for dynamic kernels is within 5% of it).
Correctness: every output of the sweep is compared with eager's (allclose).

Steady-state ratios between modes come from separate processes here (each mode has its own
compile state); on this VM the memory bandwidth differs between processes, so compare per-call
columns within a row with care, and prefer the sweep time and compile counts.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, random, statistics, sys, time
import torch
torch.set_num_threads(2)
from dynamic_cases import pointwise, reduction, softmax_ln

CASES = {"pointwise": (pointwise, lambda n: (n, 256)), "reduction": (reduction, lambda n: (n, 512)),
         "softmax_ln": (softmax_ln, lambda n: (8, n))}
case, mode, lengths_json, static = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
fn, shape = CASES[case]
lengths = json.loads(lengths_json)
probe = [lengths[0], sorted(lengths)[len(lengths) // 2], max(lengths)]
if mode == "fastdyn":
    import fastdyn
    fastdyn.set_background_compile(False)  # compile on the calling thread: the sweep pays it
    run = fastdyn.jit(fn)
elif mode == "inductor":
    run = torch.compile(fn, dynamic=None)
else:
    run = fn
g = torch.Generator().manual_seed(0)
inputs = {n: torch.randn(*shape(n), generator=g) for n in set(lengths) | set(probe)}
out = {}
def per_call(n):
    x = inputs[n]
    for _ in range(5):
        run(x)
    ts = []
    for _ in range(200):
        t = time.perf_counter_ns()
        run(x)
        ts.append(time.perf_counter_ns() - t)
    return statistics.median(ts) / 1e3
if static:  # one length only per process: the static kernel's speed
    out["static_us"] = {str(n): per_call(n) for n in probe}
else:
    order = list(lengths)
    random.Random(0).shuffle(order)
    ok = True
    t0 = time.perf_counter()
    for n in order:
        y = run(inputs[n])
        ok = ok and torch.allclose(y, fn(inputs[n]), rtol=1e-4, atol=1e-5)
    out["sweep_s"] = time.perf_counter() - t0
    out["correct"] = bool(ok)
    if mode == "fastdyn":
        out["compiles"] = fastdyn.stats()["frames_compiled"]
        out["sizes_compiled"] = fastdyn.stats()["sizes_compiled"]
    elif mode == "inductor":
        from torch._dynamo.utils import counters
        out["compiles"] = int(counters["stats"]["unique_graphs"])
    else:
        out["compiles"] = 0
    out["per_call_us"] = {str(n): per_call(n) for n in probe}
print("RESULT " + json.dumps(out))
"""


def run_child(case, mode, lengths, static=False):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "python"), os.path.join(ROOT, "bench")]) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.setdefault("FASTDYN_CACHE_DIR", tempfile.mkdtemp(prefix="fd_dyn_cache_"))  # a cold kernel cache
    p = subprocess.run([sys.executable, "-c", CHILD, case, mode, json.dumps(lengths), "1" if static else "0"],
                       capture_output=True, text=True, env=env, timeout=1800)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"error": (p.stderr.strip().splitlines() or ["no output"])[-1]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", type=int, default=100)
    ap.add_argument("--cases", default="pointwise,reduction,softmax_ln")
    ap.add_argument("--modes", default="eager,inductor,fastdyn")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()
    lengths = [8 + 5 * i for i in range(args.lengths)]  # 8 .. 503, distinct
    rows = []
    for case in args.cases.split(","):
        for mode in args.modes.split(","):
            r = run_child(case, mode, lengths)
            if mode != "eager" and "error" not in r:
                probe = list(r["per_call_us"])
                r["static_us"] = {n: run_child(case, mode, [int(n)], static=True).get("static_us", {}).get(n)
                                  for n in probe}
            rows.append((case, mode, r))
            print(case, mode, json.dumps(r), flush=True)
    print()
    print(f"| case | mode | sweep of {args.lengths} lengths (s) | compiles | correct | per call after the sweep (us) | static kernel (us) |")
    print("|---|---|---|---|---|---|---|")
    for case, mode, r in rows:
        if "error" in r:
            print(f"| {case} | {mode} | FAILED: {r['error'][:80]} | | | | |")
            continue
        pc = " / ".join(f"{v:.0f}" for v in r["per_call_us"].values())
        st = " / ".join("-" if v is None else f"{v:.0f}" for v in r.get("static_us", {}).values()) or "-"
        compiles = str(r["compiles"]) + (f" (+{r['sizes_compiled']} sizes)" if r.get("sizes_compiled") else "")
        print(f"| {case} | {mode} | {r['sweep_s']:.2f} | {compiles} | {r['correct']} | {pc} | {st} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
