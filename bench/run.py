#!/usr/bin/env python3
"""Runs every benchmark case under eager, torch.compile (inductor) and fastdyn, side by side.

    python3 bench/run.py                      # every case x every mode (inductor is slow)
    python3 bench/run.py --quick              # skip inductor
    python3 bench/run.py --cases mlp,attention --modes eager,fastdyn --out bench/results

Modes: eager, inductor, fastdyn (cold kernel cache), fastdyn_warm (a fresh process over a kernel
cache that a throwaway fastdyn process has just filled).
Each (case, mode) runs in a fresh process (`run.py --one CASE MODE`), so that first-call times
include everything a cold process pays: compilation, lazy initialisation, kernel caches.
The parent only orchestrates and compares outputs with eager's; it never runs a case itself.
Results: OUT/results.json and OUT/results.md (see bench/README.md for the columns).
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MODES = ("eager", "inductor", "fastdyn", "fastdyn_warm")
THREADS = 2

# Steady-state timing: warm-up for WARMUP_S, then batches of about BATCH_S seconds each, for
# about --min-time seconds in total.
WARMUP_S = 0.2
BATCH_S = 0.05
MIN_BATCHES, MAX_BATCHES = 5, 200


# ================================ child: one case, one mode ====================================

def _no_fastdyn_skip(fn):
    return fn


class Runner:
    """Builds the callable for a mode; all compilation happens lazily, inside the first call."""

    def __init__(self, case, mode: str, backend: str):
        self.case, self.mode = case, mode
        self.fastdyn = None
        self.skip = _no_fastdyn_skip
        fn, self.args = case.factory()
        if mode == "eager":
            self.fn = fn
        elif mode == "inductor":
            import torch
            self.fn = torch.compile(fn)  # lazy: compiles on the first call
        elif mode in ("fastdyn", "fastdyn_warm"):  # warm: same, over a primed disk cache
            import fastdyn  # a failure here is reported as the cell's error
            self.fastdyn = fastdyn
            self.skip = getattr(fastdyn, "skip", _no_fastdyn_skip)
            kwargs = {"backend": backend} if backend else {}
            if hasattr(fastdyn, "reset"):
                fastdyn.reset()  # stats count only the timed calls
            if case.whole_process:
                self.fn = fn
                fastdyn.enable(**kwargs)  # the timed calls below run with the hook on
            else:
                self.fn = fastdyn.jit(fn, **kwargs)
        else:
            raise ValueError(f"unknown mode {mode!r}")

    def stats(self):
        if self.fastdyn is None or not hasattr(self.fastdyn, "stats"):
            return None
        return {k: v for k, v in dict(self.fastdyn.stats()).items()
                if isinstance(v, (int, float, str, bool))}


def _cpu_ticks():
    """(busy ticks of the whole machine, ticks of this process), from /proc; None elsewhere."""
    try:
        cpu = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        own = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        # /proc/stat: user nice system idle iowait irq softirq steal ...; /proc/self/stat after
        # the command name: utime and stime are fields 12 and 13.
        return sum(cpu[:3]) + sum(cpu[5:8]), int(own[11]) + int(own[12])
    except (OSError, ValueError, IndexError):
        return None


def others_cpu(before, after, wall_ns: int):
    """Cores' worth of CPU that other processes used meanwhile: the noise in our timings."""
    if before is None or after is None or wall_ns <= 0:
        return None
    hz = os.sysconf("SC_CLK_TCK")
    others = (after[0] - before[0]) - (after[1] - before[1])
    return round(max(others, 0) / hz / (wall_ns / 1e9), 2)


def measure(fn, args, min_time_s: float, iters: int, settle=None):
    """First call, then warm-up, then timed batches, then one more call.

    Returns (first_ns, settle_ns, per-call ns of each batch, calls per batch, first output, last
    output): the first call compiles, the last one runs what is cached, and both are checked.
    `settle` (fastdyn.synchronize) runs right after the first call and waits for the kernels that
    tiered compilation builds in the background, so that the timed calls run them; settle_ns is
    how long it waited (the first call's return to kernels ready).

    NB: wrapped by fastdyn.skip in fastdyn mode, so that whole-process mode compiles the case's
    own frames and not this loop."""
    from time import perf_counter_ns as now
    t0 = now()
    out = fn(*args)
    first_ns = now() - t0
    t0 = now()
    if settle is not None:
        settle()
    settle_ns = now() - t0

    warm = []
    deadline = now() + int(WARMUP_S * 1e9)
    while len(warm) < 3 or (now() < deadline and len(warm) < 1000):
        t0 = now()
        fn(*args)
        warm.append(now() - t0)
    est_ns = max(statistics.median(warm), 1)

    if iters:
        n_batches = min(10, iters)
        per_batch = max(1, iters // n_batches)
    else:
        per_batch = max(1, int(BATCH_S * 1e9 / est_ns))
        n_batches = int(min(MAX_BATCHES, max(MIN_BATCHES, min_time_s * 1e9 / (per_batch * est_ns))))
    batches = []
    for _ in range(n_batches):
        t0 = now()
        for _ in range(per_batch):
            fn(*args)
        batches.append((now() - t0) / per_batch)
    return first_ns, settle_ns, batches, per_batch, out, fn(*args)


def run_one(case_name: str, mode: str, json_out: Path, tensors_out: Path, min_time_s: float,
            iters: int, backend: str) -> int:
    result = {"case": case_name, "mode": mode, "status": "failed", "stage": "import"}

    def write():
        json_out.write_text(json.dumps(result, indent=1))

    try:
        import torch
        torch.set_num_threads(THREADS)
        sys.path.insert(0, str(HERE))
        from cases import CASES, flatten_outputs
        case = CASES[case_name]
        result["bytes_moved"] = case.bytes_moved
        result["stage"] = "setup"
        t0 = time.perf_counter_ns()
        runner = Runner(case, mode, backend)
        result["setup_ms"] = (time.perf_counter_ns() - t0) / 1e6
        result["stage"] = "run"
        timed = runner.skip(measure)
        ticks, t0 = _cpu_ticks(), time.perf_counter_ns()
        with torch.no_grad():
            first_ns, settle_ns, batches, per_batch, first, last = timed(
                runner.fn, runner.args, min_time_s, iters, getattr(runner.fastdyn, "synchronize", None))
        result["others_cpu"] = others_cpu(ticks, _cpu_ticks(), time.perf_counter_ns() - t0)
        if runner.fastdyn is not None and case.whole_process:
            runner.fastdyn.disable()
        result.update(
            status="ok", stage="done", first_call_ns=first_ns, kernels_ready_ns=settle_ns,
            median_ns=statistics.median(batches), min_ns=min(batches),
            batches=len(batches), iters_per_batch=per_batch, fastdyn_stats=runner.stats())
        outputs = case.outputs or flatten_outputs
        values = outputs(first) + outputs(last)
        torch.save([v.detach().clone() if isinstance(v, torch.Tensor) else v for v in values],
                   tensors_out)
    except BaseException as e:  # the harness reports every failure as a cell, never crashes
        import traceback
        result["error"] = f"{type(e).__name__}: {e}".strip()[:2000]
        result["traceback"] = traceback.format_exc()[-4000:]
    write()
    return 0 if result["status"] == "ok" else 1


# ================================ parent: orchestration =========================================

def machine_info():
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {"cpu": cpu, "cores": os.cpu_count(), "threads": THREADS,
            "python": platform.python_version(), "platform": platform.platform()}
    probe = ("import torch, json; v = {'torch': torch.__version__}\n"
             "try:\n import fastdyn; v['fastdyn'] = fastdyn.__version__\n"
             "except Exception as e: v['fastdyn'] = 'unavailable (%s)' % type(e).__name__\n"
             "print(json.dumps(v))")
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             timeout=120, env=child_env("eager", "warm", None))
        info.update(json.loads(out.stdout.strip().splitlines()[-1]))
    except Exception as e:
        info["torch"] = f"unknown ({e})"
    try:
        git = ["git", "-C", str(ROOT)]
        info["commit"] = subprocess.run(git + ["rev-parse", "--short", "HEAD"],
                                        capture_output=True, text=True).stdout.strip()
        if subprocess.run(git + ["status", "--porcelain", "--untracked-files=no"],
                          capture_output=True, text=True).stdout.strip():
            info["commit"] += " + uncommitted changes"
    except OSError:
        pass
    return info


# glibc's malloc hands 1-4 MB tensor buffers back to the kernel (heap trim, mmap) in some runs and
# not in others, so the same process measures 1x or 3x depending on heap layout (measured: 2,900
# vs 7,100 page faults per call of pointwise_1m, eager and fastdyn alike). Every mode gets the
# same pinned thresholds so the table compares compute, not allocator luck; --malloc default
# measures glibc as shipped.
PINNED_MALLOC = {"MALLOC_TRIM_THRESHOLD_": "1000000000", "MALLOC_MMAP_THRESHOLD_": "1000000000"}
MALLOC_MODE = "pinned"


def child_env(mode: str, inductor_cache: str, scratch, fastdyn_cache=None):
    env = dict(os.environ)
    if fastdyn_cache:
        env["FASTDYN_CACHE_DIR"] = fastdyn_cache  # see run_cell
    env["OMP_NUM_THREADS"] = str(THREADS)
    if MALLOC_MODE == "pinned":
        env.update(PINNED_MALLOC)
    env["PYTHONFAULTHANDLER"] = "1"  # a crash names the Python line it happened under
    # The source tree's package (CMake builds _C into it) unless PYTHONPATH names another.
    env["PYTHONPATH"] = os.pathsep.join(
        [p for p in [env.get("PYTHONPATH")] if p] + [str(ROOT / "python")])
    if mode == "inductor" and inductor_cache != "warm":
        # A fresh cache per process: otherwise a second run measures a cache hit, not a compile.
        env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor_", dir=scratch)
        if inductor_cache == "cold":
            # NB: inductor keeps its precompiled C++ header (~150 MB) under
            # tempfile.gettempdir(), outside TORCHINDUCTOR_CACHE_DIR; a fresh TMPDIR rebuilds it.
            env["TMPDIR"] = tempfile.mkdtemp(prefix="tmp_", dir=scratch)
    return env


def wait_quiet(max_wait_s: float, quiet_cores: float = 0.25):
    """Waits until other processes use less than quiet_cores of CPU (sampled over 1 s), for at
    most max_wait_s; returns the last sample."""
    deadline = time.monotonic() + max_wait_s
    while True:
        before, t0 = _cpu_ticks(), time.perf_counter_ns()
        time.sleep(1.0)
        busy = others_cpu(before, _cpu_ticks(), time.perf_counter_ns() - t0)
        if busy is None or busy < quiet_cores or time.monotonic() >= deadline:
            return busy


def inductor_header_built() -> bool:
    """Whether inductor's machine-wide precompiled header exists (see child_env)."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
        return any(Path(default_cache_dir(), "precompiled_headers").glob("*.gch"))
    except Exception:  # a torch without that layout: warm up to be safe
        return False


def run_cell(case: str, mode: str, args, raw: Path, scratch: Path, rep: int = 0):
    """One measured process. fastdyn gets an empty kernel cache directory of its own (its first
    call is a cold compile, whatever earlier runs left on disk); fastdyn_warm gets one that a
    throwaway fastdyn process of the same case has just filled, so its first call measures a
    warm start: a fresh process whose kernels are all on disk."""
    fastdyn_cache = None
    if mode in ("fastdyn", "fastdyn_warm"):
        fastdyn_cache = tempfile.mkdtemp(prefix="fastdyn_cache_", dir=scratch)
    if mode == "fastdyn_warm":
        primer = argparse.Namespace(**dict(vars(args), iters=1, min_time=0))
        prime = run_process(case, "fastdyn", primer, raw, scratch, f"{rep}_prime", fastdyn_cache)
        if prime["status"] != "ok":
            return dict(prime, mode=mode, error="priming run: " + (prime.get("error") or ""))
    return run_process(case, mode, args, raw, scratch, rep, fastdyn_cache)


def run_process(case: str, mode: str, args, raw: Path, scratch: Path, rep, fastdyn_cache):
    json_out = raw / f"{case}__{mode}__{rep}.json"
    tensors_out = raw / f"{case}__{mode}__{rep}.pt"
    for p in (json_out, tensors_out):
        p.unlink(missing_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", case, mode,
           "--json-out", str(json_out), "--tensors-out", str(tensors_out),
           "--min-time", str(args.min_time), "--iters", str(args.iters)]
    if args.fastdyn_backend:
        cmd += ["--fastdyn-backend", args.fastdyn_backend]
    busy_before = wait_quiet(args.wait_quiet) if args.wait_quiet > 0 else None
    t0 = time.monotonic()
    # A session of its own, so that a timeout also ends the compile workers it may have started.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=child_env(mode, args.inductor_cache, scratch, fastdyn_cache),
                            cwd=str(ROOT),
                            start_new_session=True)
    try:
        _, stderr = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"case": case, "mode": mode, "status": "timeout",
                "error": f"no result after {args.timeout} s", "wall_s": args.timeout}
    wall = time.monotonic() - t0
    if json_out.exists():
        result = json.loads(json_out.read_text())
    else:  # the child died without writing: a crash (signal) or an abort
        rc = proc.returncode
        how = f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}"
        if rc < 0 and -rc in signal.valid_signals():
            how = f"killed by {signal.Signals(-rc).name}"
        result = {"case": case, "mode": mode, "status": "crashed",
                  "error": f"{how} {crash_site(stderr)}".strip()}
    result["wall_s"] = round(wall, 2)
    if busy_before is not None:
        result["others_cpu_before"] = busy_before
    result["tensors"] = str(tensors_out) if tensors_out.exists() else None
    if stderr.strip():
        result["stderr_tail"] = stderr.strip()[-4000:]
    return result


def crash_site(stderr: str) -> str:
    """The innermost Python frame of faulthandler's report (PYTHONFAULTHANDLER is set)."""
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        if "most recent call first" in line:
            frame = next((x.strip() for x in lines[i + 1:] if x.strip().startswith("File ")), "")
            return f"in {frame}" if frame else ""
    return ""


def merge_repeats(runs):
    """One cell from its repeats: any failure fails the cell; per call is the best median (the
    least disturbed by other load), first call the median of the first calls."""
    bad = [r for r in runs if r["status"] != "ok"]
    if bad:
        return dict(bad[0], repeats=len(runs), failed_repeats=len(bad))
    cell = dict(min(runs, key=lambda r: r["median_ns"]))
    cell["first_call_ns"] = statistics.median(r["first_call_ns"] for r in runs)
    cell["kernels_ready_ns"] = statistics.median(r.get("kernels_ready_ns", 0) for r in runs)
    if len(runs) > 1:
        cell["repeats"] = [{"first_call_ns": r["first_call_ns"], "median_ns": r["median_ns"]}
                           for r in runs]
    return cell


def check_outputs(merged, runs):
    """Sets correct / max_abs_diff on each cell: every repeat's outputs against eager's."""
    ref = next((r for r in runs.get("eager", []) if r.get("tensors")), None)
    for mode, cell in merged.items():
        if cell["status"] != "ok":
            continue
        if ref is None or not all(r.get("tensors") for r in runs[mode]):
            cell["correct"] = None  # nothing to compare with
            continue
        cell["correct"], cell["max_abs_diff"] = True, 0.0
        for r in runs[mode]:
            if r is ref:
                continue
            ok, diff, msg = compare(ref["tensors"], r["tensors"])
            cell["max_abs_diff"] = max(cell["max_abs_diff"], diff or 0.0)
            if not ok:
                cell["correct"], cell["mismatch"] = False, msg
                break


def tolerance(dtype):
    import torch
    table = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2),
             torch.float32: (1e-4, 1e-5), torch.float64: (1e-7, 1e-9)}
    return table.get(dtype, (0.0, 0.0))  # integers and bools: exact


def compare(ref_path, got_path):
    """(ok, max abs diff, message) of a mode's outputs against eager's."""
    import torch
    ref, got = torch.load(ref_path), torch.load(got_path)
    if len(ref) != len(got):
        return False, None, f"{len(got)} outputs, eager has {len(ref)}"
    worst = 0.0
    for i, (r, g) in enumerate(zip(ref, got)):
        if isinstance(r, torch.Tensor) != isinstance(g, torch.Tensor):
            return False, None, f"output {i}: {type(g).__name__}, eager gives {type(r).__name__}"
        if not isinstance(r, torch.Tensor):
            if r != g:
                return False, None, f"output {i}: {g!r} != eager's {r!r}"
            continue
        if r.dtype != g.dtype or r.shape != g.shape:
            return False, None, (f"output {i}: {g.dtype}{list(g.shape)}, "
                                 f"eager gives {r.dtype}{list(r.shape)}")
        if r.numel():
            diff = (r.double() - g.double()).abs()
            finite = torch.isfinite(diff)
            worst = max(worst, float(diff[finite].max()) if finite.any() else 0.0)
        rtol, atol = tolerance(r.dtype)
        if not torch.allclose(r, g, rtol=rtol, atol=atol, equal_nan=True):
            return False, worst, f"output {i} differs: max abs diff {worst:.3g}"
    return True, worst, ""


def fmt_time(ns):
    if ns is None:
        return "—"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def cell_note(r):
    if r["status"] != "ok":
        first = (r.get("error") or "").strip().splitlines()[:1]
        stage = f"{r['stage']}: " if r.get("stage") else ""
        return (stage + (first[0][:160] if first else "")).replace("|", "\\|")
    st = r.get("fastdyn_stats")
    if not st:
        return ""
    keys = ("frames_compiled", "graphs", "graph_breaks", "recompiles")
    note = ", ".join(f"{k}={st[k]}" for k in keys if k in st)
    if "compile_seconds" in st:
        note += f", compile={st['compile_seconds'] * 1e3:.3g} ms"
    if st.get("background_compiles"):
        note += (f", kernels built in the background: {st['background_compile_seconds'] * 1e3:.3g} ms, "
                 f"ready {r.get('kernels_ready_ns', 0) / 1e6:.3g} ms after the first call")
    if st.get("frames_compiled") == 0:
        note += " (nothing compiled: ran eagerly)"
    return note


def args_cache_note(info):
    return {
        "fresh": "a new TORCHINDUCTOR_CACHE_DIR per process; the machine-wide precompiled "
                 f"header built beforehand ({info.get('inductor_warmup', 'already there')}), "
                 "as on any machine that has run torch.compile once",
        "cold": "a new TORCHINDUCTOR_CACHE_DIR and TMPDIR per process (precompiled header "
                "rebuilt each time, as on a fresh machine)",
        "warm": "reused from earlier runs (first call may be a cache hit)",
    }[info["inductor_cache"]]


def max_others(results):
    loads = [r["others_cpu"] for r in results if r.get("others_cpu") is not None]
    return f"{max(loads):.2f}" if loads else "unknown"


def gb_per_s(r):
    """Achieved bandwidth of a cell: the bytes an ideal fused kernel moves / time per call."""
    if r is None or r.get("status") != "ok" or not r.get("bytes_moved"):
        return None
    return r["bytes_moved"] / r["median_ns"]  # bytes per ns = GB/s


def bandwidth_lines(by_key, cases, modes, reference="copy_16m"):
    """GB/s of every cell whose case declares bytes_moved, and its ratio to eager's copy_ of the
    same size in the same run (the machine's measured bandwidth)."""
    rows = [(c, m, gb_per_s(by_key.get((c, m)))) for c in cases for m in modes]
    rows = [(c, m, g) for c, m, g in rows if g is not None]
    if not rows:
        return []
    ref = gb_per_s(by_key.get((reference, "eager")))
    lines = ["", f"Memory bandwidth (bytes an ideal fused kernel reads and writes / per-call time; "
                 f"reference: {reference} in eager, {ref:.1f} GB/s):" if ref else
             f"Memory bandwidth ({reference} in eager not run: no reference):", "",
             f"| case | mode | GB/s | vs {reference} |", "|---|---|---:|---:|"]
    for c, m, g in rows:
        lines.append(f"| {c} | {m} | {g:.1f} | {f'{g / ref:.0%}' if ref else '—'} |")
    return lines


def compile_cost_lines(by_key, cases):
    """Compilation's share of the first call: a cold process's first call minus eager's first call
    in the same run (both pay the same lazy initialisation of torch, MKL, the page cache's misses),
    for fastdyn (empty kernel cache) and inductor, and fastdyn's cost as a share of inductor's
    (issue 4's target: at most 1%). fastdyn compiles its kernels in the background (tiered
    compilation): the first call runs on ATen, and "until kernels run" adds the wait, right after
    the first call, until they were ready (fastdyn.synchronize()): the whole compile, for
    comparison with inductor's, which the first call always includes."""
    def extra(case, mode):
        r, e = by_key.get((case, mode)), by_key.get((case, "eager"))
        ok = r and e and r["status"] == "ok" and e["status"] == "ok"
        return (r["first_call_ns"] - e["first_call_ns"]) if ok else None
    rows = [(c, extra(c, "fastdyn"), extra(c, "inductor")) for c in cases]
    rows = [row for row in rows if row[1] is not None and row[2] is not None]
    if not rows:
        return []
    lines = ["", "Compile cost (first call minus eager's first call, same run; a negative fastdyn "
                 "cost means its first call beat eager's):", "",
             "| case | fastdyn | inductor | fastdyn / inductor | fastdyn until kernels run | "
             "that / inductor |", "|---|---:|---:|---:|---:|---:|"]
    for c, f, i in rows:
        share = f"{max(f, 0) / i:.2%}" if i > 0 else "—"
        total = f + by_key[(c, "fastdyn")].get("kernels_ready_ns", 0)
        total_share = f"{max(total, 0) / i:.2%}" if i > 0 else "—"
        lines.append(f"| {c} | {f / 1e6:+.1f} ms | {i / 1e6:+.0f} ms | {share} | {total / 1e6:+.1f} ms | "
                     f"{total_share} |")
    return lines


def write_reports(out: Path, info, results, cases, modes, argv):
    (out / "results.json").write_text(json.dumps(
        {"machine": info, "command": argv, "results": results}, indent=1))
    lines = [
        "# fastdyn benchmark",
        "",
        f"- machine: {info['cpu']}, {info['cores']} cores; torch.set_num_threads({THREADS})",
        f"- python {info['python']}, torch {info.get('torch')}, fastdyn {info.get('fastdyn')}"
        + (f" (commit {info['commit']})" if info.get("commit") else ""),
        f"- date: {info['date']}; command: `{' '.join(argv)}`",
        "- each case x mode in a fresh process; first call includes compilation; per call is the "
        "median of timed batches after warm-up"
        + (f" (best of {info['repeat']} processes, interleaved)" if info["repeat"] > 1 else "")
        + "; outputs compared with eager's (torch.allclose: float32 rtol 1e-4, atol 1e-5)",
        "- other load: cores' worth of CPU that other processes used while the cell was timed "
        f"(max here {max_others(results)}; 0 is a quiet machine; on {info['cores']} cores, "
        "anything above ~0.2 disturbs the timings, OpenMP regions most)",
    ] + ([f"- inductor caches: {args_cache_note(info)}"] if "inductor" in modes else []) + [
        f"- malloc: {'glibc thresholds pinned for every mode (' + ', '.join(f'{k}={v}' for k, v in PINNED_MALLOC.items()) + '), see run.py' if MALLOC_MODE == 'pinned' else 'glibc defaults'}",
        "",
        "| case | mode | first call | per call (median) | vs eager | correct | other load | notes |",
        "|---|---|---:|---:|---:|---|---:|---|",
    ]
    by_key = {(r["case"], r["mode"]): r for r in results}
    for case in cases:
        eager = by_key.get((case, "eager"))
        for mode in modes:
            r = by_key.get((case, mode))
            if r is None:
                continue
            if r["status"] != "ok":
                lines.append(f"| {case} | {mode} | {r['status'].upper()} | — | — | — | — | "
                             f"{cell_note(r)} |")
                continue
            speed = "—"
            if eager and eager["status"] == "ok":
                speed = f"{eager['median_ns'] / r['median_ns']:.2f}×"
            correct = {True: "yes", False: "NO", None: "?"}[r.get("correct")]
            if r.get("max_abs_diff") is not None and mode != "eager":
                correct += f" ({r['max_abs_diff']:.1g})"
            note = cell_note(r)
            if mode == "fastdyn_warm" and eager and eager["status"] == "ok":
                extra = (r["first_call_ns"] - eager["first_call_ns"]) / 1e6
                note = f"warm start: first call {extra:+.1f} ms vs eager's; {note}".strip("; ")
            if r.get("correct") is False:
                note = (r.get("mismatch", "") + "; " + note).strip("; ")
            others = r.get("others_cpu")
            others = "?" if others is None else f"{others:.2f}"
            lines.append(f"| {case} | {mode} | {fmt_time(r['first_call_ns'])} | "
                         f"{fmt_time(r['median_ns'])} | {speed} | {correct} | {others} | {note} |")
    lines += bandwidth_lines(by_key, cases, modes)
    lines += compile_cost_lines(by_key, cases)
    lines.append("")
    (out / "results.md").write_text("\n".join(lines))
    return "\n".join(lines)


def main(argv=None):
    import torch  # noqa: F401  (only for comparing outputs; cases run in children)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--cases", help="comma-separated case names (default: all)")
    p.add_argument("--modes", help=f"comma-separated, of {','.join(MODES)} (default: all)")
    p.add_argument("--quick", action="store_true", help="skip inductor (tens of seconds per case)")
    p.add_argument("--out", default=str(HERE / "results"), help="output folder")
    p.add_argument("--timeout", type=int, default=600, help="seconds per (case, mode) process")
    p.add_argument("--min-time", type=float, default=1.0, help="seconds of timed steady state")
    p.add_argument("--repeat", type=int, default=1,
                   help="processes per cell, interleaved across modes; per call = best median")
    p.add_argument("--wait-quiet", type=float, default=0, metavar="S",
                   help="before each process, wait up to S seconds for other processes to\n"
                        "  use less than a quarter of a core")
    p.add_argument("--iters", type=int, default=0, help="fixed number of timed calls instead")
    p.add_argument("--inductor-cache", choices=("fresh", "cold", "warm"), default="fresh",
                   help="fresh: a new inductor cache per process, but the machine-wide\n"
                        "  precompiled header is built once beforehand (not timed);\n"
                        "cold: rebuild that header in every inductor process too;\n"
                        "warm: reuse whatever inductor has cached on disk")
    p.add_argument("--fastdyn-backend", default="", help="backend= for fastdyn.jit / enable")
    p.add_argument("--malloc", choices=("pinned", "default"), default="pinned",
                   help="pin glibc's trim/mmap thresholds in every mode (default) or keep glibc's")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--one", nargs=2, metavar=("CASE", "MODE"), help=argparse.SUPPRESS)
    p.add_argument("--json-out", help=argparse.SUPPRESS)
    p.add_argument("--tensors-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    global MALLOC_MODE
    MALLOC_MODE = args.malloc

    if args.one:
        return run_one(args.one[0], args.one[1], Path(args.json_out), Path(args.tensors_out),
                       args.min_time, args.iters, args.fastdyn_backend)

    sys.path.insert(0, str(HERE))
    from cases import CASES
    if args.list:
        for c in CASES.values():
            print(f"{c.name:18} {c.description}")
        return 0
    cases = args.cases.split(",") if args.cases else list(CASES)
    modes = args.modes.split(",") if args.modes else [
        m for m in MODES if not (args.quick and m == "inductor")]
    bad = [c for c in cases if c not in CASES] + [m for m in modes if m not in MODES]
    if bad:
        p.error(f"unknown case or mode: {', '.join(bad)} (see --list)")
    if any(CASES[c].bytes_moved for c in cases if c in CASES) and "copy_16m" not in cases:
        cases.append("copy_16m")  # the bandwidth reference (see bandwidth_lines)
    if "eager" not in modes:
        modes.insert(0, "eager")  # the reference for speed-ups and correctness
    modes.sort(key=MODES.index)

    out = Path(args.out).resolve()
    raw = out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="fastdyn_bench_"))
    info = machine_info()
    info["inductor_cache"], info["repeat"] = args.inductor_cache, args.repeat
    info["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cmdline = ["python3", "bench/run.py"] + list(sys.argv[1:] if argv is None else argv)

    results = []
    try:
        if "inductor" in modes and args.inductor_cache == "fresh" and not inductor_header_built():
            print("[bench] inductor warm-up (machine-wide precompiled header; not reported) ...",
                  end="", flush=True)
            warm = run_cell("overhead16", "inductor", args, scratch, scratch)
            info["inductor_warmup"] = f"{warm['status']} in {warm['wall_s']} s"
            print(f" {info['inductor_warmup']}", flush=True)
        for case in cases:
            runs = {m: [] for m in modes}
            for rep in range(args.repeat):  # interleaved, so that load changes hit every mode
                for mode in modes:
                    tag = f" #{rep + 1}" if args.repeat > 1 else ""
                    print(f"[bench] {case:18} {mode:9}{tag} ...", end="", flush=True)
                    r = run_cell(case, mode, args, raw, scratch, rep)
                    runs[mode].append(r)
                    if r["status"] == "ok":
                        print(f" first {fmt_time(r['first_call_ns']):>9}, per call "
                              f"{fmt_time(r['median_ns']):>9} ({r['wall_s']} s)", flush=True)
                    else:
                        print(f" {r['status'].upper()}: {(r.get('error') or '')[:200]}",
                              flush=True)
            merged = {m: merge_repeats(rs) for m, rs in runs.items()}
            check_outputs(merged, runs)
            results += [merged[m] for m in modes]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    table = write_reports(out, info, results, cases, modes, cmdline)
    print()
    print(table)
    print(f"[bench] wrote {out / 'results.json'} and {out / 'results.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
