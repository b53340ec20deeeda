"""What sizes as symbols cost (issue 19's targets): compile time and per-call guard time.

    python3 bench/dynamic_overhead.py

compile: for each case, the first call of a function compiled with static sizes
  (jit(dynamic=False)) against the first call of the same function with size symbols
  (jit(dynamic=True)), each in its own fresh process with a cold kernel cache and compiling on
  the calling thread, median of 3 processes; also each process's stats()['compile_seconds']
  (trace, symbolic propagation, guards and bytecode: the entry's own compile) separately from
  the first call's total (which adds lowering and LLVM for the kernels at that size).
compile, in one process: the same comparison with the process's fixed costs (imports, the LLVM
  engine, first-use initialisation) paid before timing: each round compiles a fresh function of
  each mode (a new code object whose constant differs, so that no kernel comes from a cache),
  static and symbolic interleaved, min of 9 rounds. The ratio is the compile work alone; this VM's
  speed varies between processes (and over minutes), which this comparison is immune to.
guards: a graph of 10 tensor inputs (one op each), called with 4x2 tensors so that the work is
  negligible: median per-call time with every dim static, with every dim a size symbol (20
  symbols unified into 2 by the adds: the guards bind each dim and check the others equal to it),
  and eager, interleaved in one process (steady state; the difference between the first two is
  the extra guard work of symbolic dims); then the guard check alone (the entry's guard tree over
  the same arguments, fastdyn._C.guard_check_seconds), the rest of a call being the hook, the
  kernel and the output's allocation.
Also compared with torch.compile on the compile side (dynamic=False and dynamic=True first
call, in fresh processes).
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, sys, time
import torch
torch.set_num_threads(2)
from dynamic_cases import pointwise, reduction, softmax_ln

CASES = {"pointwise": (pointwise, (64, 256)), "reduction": (reduction, (64, 512)), "softmax_ln": (softmax_ln, (8, 384))}
case, mode, dynamic = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
fn, shape = CASES[case]
x = torch.randn(*shape)
if mode == "fastdyn":
    import fastdyn
    fastdyn.set_background_compile(False)
    run = fastdyn.jit(fn, dynamic=dynamic)
else:
    run = torch.compile(fn, dynamic=dynamic)
t = time.perf_counter()
run(x)
first = time.perf_counter() - t
out = {"first_call_ms": first * 1e3}
if mode == "fastdyn":
    out["compile_ms"] = fastdyn.stats()["compile_seconds"] * 1e3
print("RESULT " + json.dumps(out))
"""


def run_child(case, mode, dynamic):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "python"), os.path.join(ROOT, "bench")]) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["FASTDYN_CACHE_DIR"] = tempfile.mkdtemp(prefix="fd_dyn_compile_")
    env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor_dyn_compile_")  # cold, like fastdyn's
    p = subprocess.run([sys.executable, "-c", CHILD, case, mode, "1" if dynamic else "0"],
                       capture_output=True, text=True, env=env, timeout=900)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError((p.stderr.strip().splitlines() or ["no output"])[-1])


def compile_table():
    print("| case | mode | first call, static sizes (ms) | first call, size symbols (ms) | ratio | fastdyn entry compile static / symbolic (ms) |")
    print("|---|---|---:|---:|---:|---|")
    for case in ["pointwise", "reduction", "softmax_ln"]:
        for mode in ["fastdyn", "inductor"]:
            res = {}
            for dynamic in (False, True):
                runs = [run_child(case, mode, dynamic) for _ in range(3)]
                res[dynamic] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            s, d = res[False]["first_call_ms"], res[True]["first_call_ms"]
            entry = (f"{res[False]['compile_ms']:.2f} / {res[True]['compile_ms']:.2f}" if mode == "fastdyn" else "-")
            print(f"| {case} | {mode} | {s:.1f} | {d:.1f} | {d / s:.2f} | {entry} |", flush=True)


INPROC_SRC = {"pointwise": "lambda x: ((x * 2 + K).sin() * x).relu() - 0.5",
              "reduction": "lambda x: (x * x).sum(-1) * K + x.amax(-1)",
              "softmax_ln": "lambda x: torch.softmax(F.layer_norm(x, (x.shape[-1],)) * K, dim=-1)"}
INPROC_SHAPES = {"pointwise": (64, 256), "reduction": (64, 512), "softmax_ln": (8, 384)}


def compile_inprocess_table(rounds=9):
    import time
    import torch
    import torch.nn.functional as F
    import fastdyn
    torch.set_num_threads(2)
    fastdyn.set_background_compile(False)
    fastdyn.set_recompile_limit(64)
    k = 1.0
    print()
    print("| case (one process, fresh function per call) | first call, static sizes (ms) | first call, size symbols (ms) | ratio |")
    print("|---|---:|---:|---:|")
    for case, src in INPROC_SRC.items():
        x = torch.randn(*INPROC_SHAPES[case])
        best = {False: float("inf"), True: float("inf")}
        for _ in range(rounds):
            for dynamic in (False, True):
                k += 1e-3  # a new constant: new kernels, not a cache hit
                fn = eval(src.replace("K", repr(k)), {"torch": torch, "F": F})
                run = fastdyn.jit(fn, dynamic=dynamic)
                t = time.perf_counter()
                out = run(x)
                best[dynamic] = min(best[dynamic], time.perf_counter() - t)
                torch.testing.assert_close(out, fn(x))
        s, d = best[False] * 1e3, best[True] * 1e3
        print(f"| {case} | {s:.1f} | {d:.1f} | {d / s:.2f} |", flush=True)


def guard_table():
    import time
    import torch
    import fastdyn
    fastdyn.set_background_compile(False)

    def ten(a, b, c, d, e, f, g, h, i, j):
        return a + b + c + d + e + f + g + h + i + j

    xs = [torch.randn(4, 2) for _ in range(10)]  # every dim 2 or more: a symbol under dynamic=True
    # NB: two code objects: entries live on the code, and a static entry whose guards hold would
    # serve the dynamic=True wrapper too.
    ten_dynamic = types.FunctionType(ten.__code__.replace(co_name="ten_dynamic"), globals())
    modes = {"eager": ten, "static": fastdyn.jit(ten, dynamic=False), "symbolic": fastdyn.jit(ten_dynamic, dynamic=True)}
    for f in modes.values():
        for _ in range(20):
            f(*xs)
    samples = {m: [] for m in modes}
    for _ in range(30):  # interleaved rounds
        for m, f in modes.items():
            t = time.perf_counter_ns()
            for _ in range(200):
                f(*xs)
            samples[m].append((time.perf_counter_ns() - t) / 200 / 1e3)
    med = {m: statistics.median(v) for m, v in samples.items()}
    # The guard check alone (fastdyn._C.guard_check_seconds: the entry's guard tree over these
    # arguments, as the hook checks it), interleaved likewise.
    checks = {"static": [], "symbolic": []}
    for _ in range(30):
        for m, fn in (("static", ten), ("symbolic", ten_dynamic)):
            checks[m].append(fastdyn._C.guard_check_seconds(fn, tuple(xs), 2000) * 1e6)
    guard = {m: statistics.median(v) for m, v in checks.items()}
    print()
    print("| 10-input graph (us) | eager | static sizes | size symbols | symbols - static |")
    print("|---|---:|---:|---:|---:|")
    print(f"| whole call, median of 30 interleaved rounds | {med['eager']:.2f} | {med['static']:.2f} | {med['symbolic']:.2f} | "
          f"{med['symbolic'] - med['static']:+.2f} |")
    print(f"| guard check alone, median of 30 | - | {guard['static']:.3f} | {guard['symbolic']:.3f} | "
          f"{guard['symbolic'] - guard['static']:+.3f} |")
    s = fastdyn.stats()
    print(f"\n(frames compiled {s['frames_compiled']}, sizes compiled {s['sizes_compiled']})")


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skip-processes", action="store_true", help="leave out the fresh-process compile table (minutes, inductor's included)")
    args = ap.parse_args()
    os.environ["FASTDYN_CACHE_DIR"] = tempfile.mkdtemp(prefix="fd_dyn_inproc_")  # no kernel from an earlier run
    if not args.skip_processes:
        compile_table()
    compile_inprocess_table()
    guard_table()
