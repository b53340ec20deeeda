"""Transparency benchmark: a tensor-free Python workload under `fastdyn run` vs plain `python`.

    python3 bench/launcher_overhead.py [--runs 7]

Runs bench/pure_python_script.py (loops, dict updates, small calls; no torch) as a whole process
under each, interleaved, and reports the median wall time of each and the ratio. Issue 3's target:
at most 5% over plain python. The script times its own work loop too (printed as "work"), which
excludes interpreter start-up.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "pure_python_script.py")


def launcher():
    built = os.path.join(HERE, "..", "python", "fastdyn", "bin", "fastdyn")  # this checkout's
    return [built if os.path.exists(built) else shutil.which("fastdyn"), "run"]


def one(cmd):
    t = time.perf_counter()
    out = subprocess.run(cmd + [SCRIPT], check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - t
    work = float(out.split("work")[1].split()[0])
    return wall, work


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    modes = {"python": [sys.executable], "fastdyn run": launcher()}
    res = {m: [] for m in modes}
    for _ in range(args.runs):
        for m, cmd in modes.items():
            res[m].append(one(cmd))
    print(f"{'mode':<12} {'wall s (median)':>16} {'work s (median)':>16}")
    for m, r in res.items():
        print(f"{m:<12} {statistics.median(w for w, _ in r):>16.3f} {statistics.median(k for _, k in r):>16.3f}")
    base = statistics.median(k for _, k in res["python"])
    over = statistics.median(k for _, k in res["fastdyn run"]) / base - 1
    wall_over = statistics.median(w for w, _ in res["fastdyn run"]) / statistics.median(w for w, _ in res["python"]) - 1
    print(f"overhead of fastdyn run: work {over * 100:+.1f}%, wall {wall_over * 100:+.1f}% (target <= +5%)")


if __name__ == "__main__":
    main()
