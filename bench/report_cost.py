"""What the HTML report costs (issue 23's target: at most 10% of the run's compile time when it is
on, nothing when it is off).

    python3 bench/report_cost.py [--reps 3]

Each (case, mode) runs in a fresh process with a cold kernel cache (FASTDYN_CACHE_DIR empty) and
compiles on the calling thread (set_background_compile(False)), so that the first call holds every
compile: the trace, the passes, LLVM. Modes: eager (the first call's scale), fastdyn with no report,
fastdyn recording a report (start_report before the first call), and in that process the time
report() takes to collect and write the page. The table gives medians over --reps processes:
first-call time, stats()['compile_seconds'], the recording's extra first-call time against no report,
and the write time as a share of the first call of the recording process. This VM's speed varies
between processes, so read the extra time against its spread (printed).

Then, in one process (immune to that variance): GPT-2's whole compile (reset() between rounds, the
kernel cache bounded to 1 kernel and no disk cache, so every round compiles every kernel with
LLVM) with and without a report recording, interleaved, 6 rounds after a warm-up; and report()'s
collect + render + write, min of 3 after the first (the first adds the renderer's import).
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
import json, os, sys, time
import torch
torch.set_num_threads(2)
case, mode, out = sys.argv[1], sys.argv[2], sys.argv[3]
import fastdyn
fastdyn.set_background_compile(False)

def mlp_with_a_break():
    blocks = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.LayerNorm(256))
                                  for _ in range(8)])
    def f(x):
        for i, b in enumerate(blocks):
            x = b(x) + x
            if i == 3:
                print("", end="")  # a graph break in the middle
        return x.softmax(-1)
    return f, (torch.randn(64, 256),), {}

def gpt2():
    sys.path.insert(0, os.path.join(os.environ["BENCH_REPO_ROOT"], "tests", "python"))
    import hf_zoo
    model, inputs = hf_zoo.build("gpt2")
    return model, (), inputs

f, args, kwargs = {"mlp_with_a_break": mlp_with_a_break, "gpt2": gpt2}[case]()
result = {}
with torch.no_grad():
    if mode == "eager":
        t0 = time.perf_counter(); f(*args, **kwargs); result["first_call_s"] = time.perf_counter() - t0
    else:
        if mode == "report":
            fastdyn.start_report()
        fastdyn.enable()
        t0 = time.perf_counter(); f(*args, **kwargs); result["first_call_s"] = time.perf_counter() - t0
        fastdyn.disable()
        result["compile_s"] = fastdyn.stats()["compile_seconds"]
        if mode == "report":
            t0 = time.perf_counter()
            fastdyn.report(out + ".html")
            result["write_s"] = time.perf_counter() - t0
            result["report_bytes"] = os.path.getsize(out + ".html")
json.dump(result, open(out, "w"))
"""


def run(case, mode):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        env = dict(os.environ, FASTDYN_CACHE_DIR=os.path.join(tmp, "cache"), BENCH_REPO_ROOT=ROOT)
        env.pop("FASTDYN_REPORT", None)
        subprocess.run([sys.executable, "-c", CHILD, case, mode, out], env=env, check=True, cwd=tmp)
        with open(out) as f:
            return json.load(f)


IN_PROCESS = r"""
import gc, os, statistics, sys, time
import torch
torch.set_num_threads(2)
sys.path.insert(0, os.path.join(os.environ["BENCH_REPO_ROOT"], "tests", "python"))
import fastdyn, hf_zoo
from fastdyn import _report, report_html
fastdyn.set_background_compile(False)
model, inputs = hf_zoo.build("gpt2")
times = {"off": [], "report": []}
with torch.no_grad():
    model(**inputs)
    for r in range(7):
        for mode in times:
            fastdyn.reset()
            if mode == "report":
                fastdyn.start_report()
            fastdyn.enable()
            t0 = time.perf_counter(); model(**inputs); dt = time.perf_counter() - t0
            fastdyn.disable()
            fastdyn.stop_report()
            if r:
                times[mode].append(dt)
writes = []
for _ in range(4):
    t0 = time.perf_counter(); fastdyn.report(os.path.join(sys.argv[1], "r.html")); writes.append(time.perf_counter() - t0)
off, rep = statistics.median(times["off"]), statistics.median(times["report"])
print(f"| gpt2, in one process | {1e3 * off:.1f} (min {1e3 * min(times['off']):.1f}) | {1e3 * rep:.1f} (min {1e3 * min(times['report']):.1f}) "
      f"| {rep / off - 1:+.1%} | {1e3 * min(writes[1:]):.1f} (first {1e3 * writes[0]:.1f}) | {min(writes[1:]) / rep:.1%} |")
"""


def in_process():
    print("\n| case | whole compile, no report (ms, median) | with the report recording | extra | report() (ms) | write / compile |")
    print("|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, FASTDYN_CACHE_DIR="off", FASTDYN_KERNEL_CACHE_SIZE="1", BENCH_REPO_ROOT=ROOT)
        env.pop("FASTDYN_REPORT", None)
        subprocess.run([sys.executable, "-c", IN_PROCESS, tmp], env=env, check=True, cwd=tmp)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    reps = ap.parse_args().reps
    print("| case | eager first call (ms) | fastdyn first call, no report (ms) | with the report recording (ms) "
          "| extra | compile_seconds no report / report (ms) | report() write (ms) | write / first call | page KB |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|")
    for case in ("mlp_with_a_break", "gpt2"):
        rows = {m: [] for m in ("eager", "off", "report")}
        for _ in range(reps):
            for mode in rows:  # interleaved: each rep runs every mode once
                rows[mode].append(run(case, mode))
        med = {m: {k: statistics.median(r[k] for r in rows[m]) for k in rows[m][0]} for m in rows}
        spread = lambda m: f"{1e3 * min(r['first_call_s'] for r in rows[m]):.0f}-{1e3 * max(r['first_call_s'] for r in rows[m]):.0f}"
        off, rep = med["off"], med["report"]
        print(f"| {case} | {1e3 * med['eager']['first_call_s']:.1f} | {1e3 * off['first_call_s']:.1f} ({spread('off')}) "
              f"| {1e3 * rep['first_call_s']:.1f} ({spread('report')}) | {rep['first_call_s'] / off['first_call_s'] - 1:+.1%} "
              f"| {1e3 * off['compile_s']:.1f} / {1e3 * rep['compile_s']:.1f} | {1e3 * rep['write_s']:.1f} "
              f"| {rep['write_s'] / rep['first_call_s']:.1%} | {rep['report_bytes'] / 1024:.0f} |")
    in_process()


if __name__ == "__main__":
    main()
