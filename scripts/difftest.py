#!/usr/bin/env python3
"""Long differential-testing run: random programs (tests/difftest/generator.py), each run eagerly
and under fastdyn (tests/difftest/runner.py), in worker processes so that a crash is reported with
its seed instead of ending the run.

    python scripts/difftest.py --n 10000 --seed 0 --jobs 2

Prints the counts of programs, mismatches, leaks (lifetime mismatches), crashes and hangs, the
time taken, then, for each class of mismatch (the categories that differ plus a normalised form of
the first difference), its seeds and a minimal reproducer: the program shrunk statement by
statement while the mismatch persists, written to --out as a standalone script that runs the
program eagerly and under fastdyn and prints both.
"""
import argparse
import collections
import os
import re
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "difftest"))

import generator  # noqa: E402
import runner  # noqa: E402


def signature(answer):
    """A class of mismatch: the differing categories and the shape of the first difference (numbers,
    variable names and values stripped)."""
    cats = answer.get("categories", [])
    first = ""
    for _, cat, detail in answer.get("diffs", []):
        if cat == cats[0]:
            first = detail.splitlines()[0] if detail else ""
            break
    first = re.sub(r"tensor\(\[.*", "tensor(...)", first)
    first = re.sub(r"\[[^\]]*\]", "[]", first)
    first = re.sub(r"'[^']*'", "''", first)
    first = re.sub(r"\b[a-z]+\d+\b", "v", first)
    first = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "N", first)
    return " | ".join(cats) + " :: " + first[:160]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1000, help="number of programs")
    ap.add_argument("--seed", type=int, default=0, help="first seed (programs use seed .. seed+n-1)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per program before it counts as a hang")
    ap.add_argument("--shrink", type=int, default=2,
                    help="programs to shrink per mismatch class (0: none)")
    ap.add_argument("--shrink-seconds", type=float, default=300.0, help="time limit per shrink")
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "difftest_out"),
                    help="folder for the reproducers")
    ap.add_argument("--backend", default="mixed", choices=["mixed", "native", "aten"],
                    help="fastdyn backend: native (LLVM kernels, the default backend; slower), aten, "
                         "or mixed (every fourth seed native)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)

    seeds = list(range(args.seed, args.seed + args.n))
    pool = runner.WorkerPool(args.jobs, args.timeout)
    t0 = time.monotonic()
    done = [0]
    bad = []

    def progress(req, ans):
        done[0] += 1
        if ans.get("status") == "mismatch":
            bad.append(req["seed"])
            if not args.quiet:
                print(f"  seed {req['seed']}: {', '.join(ans.get('categories', []))}", flush=True)
        if not args.quiet and done[0] % 100 == 0:
            print(f"[{done[0]}/{len(seeds)}] {time.monotonic() - t0:.0f} s, {len(bad)} mismatching",
                  flush=True)

    try:
        answers = runner.run_seeds(seeds, pool, progress, args.backend)
    finally:
        pool.close()
    elapsed = time.monotonic() - t0

    counts = collections.Counter(a["status"] for a in answers)
    mism = [a for a in answers if a["status"] == "mismatch"]
    leaks = [a for a in mism if "lifetime" in a.get("categories", [])]
    crashes = [a for a in mism if "crash" in a.get("categories", [])]
    hangs = [a for a in mism if "hang" in a.get("categories", [])]
    errors = [a for a in answers if a["status"] == "error"]
    classes = collections.OrderedDict()
    for a in mism:
        classes.setdefault(signature(a), []).append(a)

    print()
    print(f"programs:   {len(answers)} (seeds {seeds[0]}..{seeds[-1]}), jobs {args.jobs}, backend {args.backend}")
    print(f"ok:         {counts.get('ok', 0)}")
    print(f"mismatches: {len(mism)} in {len(classes)} classes")
    print(f"leaks:      {len(leaks)}")
    print(f"crashes:    {len(crashes)}" + (f" (seeds {[a['seed'] for a in crashes]})" if crashes else ""))
    print(f"hangs:      {len(hangs)}" + (f" (seeds {[a['seed'] for a in hangs]})" if hangs else ""))
    print(f"generator errors: {len(errors)}" + (f" (seeds {[a['seed'] for a in errors][:20]})" if errors else ""))
    print(f"time:       {elapsed:.1f} s ({100 * elapsed / max(1, len(answers)):.1f} s per 100 programs)")
    cat_counts = collections.Counter(c for a in mism for c in a.get("categories", []))
    if cat_counts:
        print("by category: " + ", ".join(f"{c} {n}" for c, n in cat_counts.most_common()))
    for e in errors[:3]:
        print(f"\ngenerator error, seed {e['seed']}:\n{e.get('detail', '')[-1500:]}")

    if not classes:
        return 0
    print("\nmismatch classes:")
    for sig, group in classes.items():
        print(f"  [{len(group):4d}] {sig}  seeds {[a['seed'] for a in group][:12]}")

    if args.shrink <= 0:
        return 1
    os.makedirs(args.out, exist_ok=True)
    worker = runner.Worker(args.timeout)
    minimal = collections.OrderedDict()
    try:
        for sig, group in classes.items():
            for a in sorted(group, key=lambda a: len(generator.generate(a["seed"])))[:args.shrink]:
                seed = a["seed"]
                src = generator.generate(seed)
                t1 = time.monotonic()
                small = runner.shrink(src, runner.keep_predicate(worker, a, seed),
                                      args.shrink_seconds)
                final = worker.request({"op": "source", "source": small, "seed": seed})
                if final.get("status") != "mismatch":    # flaky: keep the original
                    small, final = src, a
                path = os.path.join(args.out, f"repro_seed{seed}.py")
                with open(path, "w") as fh:
                    fh.write(runner.reproducer(small, seed, final))
                new_sig = signature(final)
                minimal.setdefault(new_sig, []).append((seed, small, final, path))
                print(f"\nshrunk seed {seed} ({sig}) in {time.monotonic() - t1:.0f} s -> {path}",
                      flush=True)
    finally:
        worker.close()

    print("\n" + "=" * 100)
    print(f"{len(minimal)} distinct minimal mismatch classes")
    for sig, items in minimal.items():
        seed, small, final, path = min(items, key=lambda it: len(it[1]))
        body = small.split("def f(x, y, state):", 1)
        print("\n" + "-" * 100)
        print(f"class: {sig}\nseeds: {[it[0] for it in items]}  reproducer: {path}")
        for call, cat, detail in final.get("diffs", [])[:4]:
            print(f"  call {call} {cat}: {detail[:600]}")
        print("minimal program:")
        print(small)
    return 1


if __name__ == "__main__":
    sys.exit(main())
