"""fastdyn's HTML report: what it did to a program, in one self-contained file.

    FASTDYN_REPORT=out.html python train.py        # written when the process exits
    fastdyn run --report out.html train.py
    fastdyn.start_report(); ...; fastdyn.report("out.html")

The C++ layers record into a journal while a report is asked for (runtime/journal.h: one atomic
load per recording site otherwise): the hook its entries, breaks, recompiles (with the guard that
failed) and the recompile limit; the compile passes their times; the loop pipeline each fused
kernel (loop IR, the graph values it computes, the Python lines they came from); the backends
each kernel's generated code; the tiered executable when its kernels were ready; accuracy mode
(FASTDYN_CHECK=1) the first kernel that diverged from ATen. `collect()` assembles the journal
into one dict per code object (the schema is report_html.py's), `report()` renders it.
The package exports report, start_report and stop_report.
"""
import atexit
import datetime
import gc
import linecache
import os
import re
import sys
import warnings

import torch

from . import _C

_REPORT_ENV = "FASTDYN_REPORT"


def start_report(clear=True, check=None):
    """Starts recording what fastdyn does, for report(); `clear` forgets what was recorded.
    check=True turns accuracy mode on (as FASTDYN_CHECK=1): graphs compiled from now on also run
    op by op on ATen in float64 at each call, and the report names the first kernel that diverged."""
    if clear:
        _C.journal_clear()
        _C.check_clear()
    if check is not None:
        _C.set_check(bool(check))
    _C.journal_on(True)


def stop_report():
    """Stops recording (what was recorded stays until the next start_report()); accuracy mode,
    if start_report turned it on, stays on until start_report(check=False)."""
    _C.journal_on(False)


# What _scan stops at: a triple quote, a one-line string (whole), a comment, a bracket.
_TOKEN = re.compile("('''|\"\"\")" r"""|('(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")|(#)|([(\[{])|([)\]}])""")


def _scan(line, state):
    """Moves state = [bracket depth, open triple quote or None] over one source line."""
    i = 0
    depth, triple = state
    while True:
        if triple:
            j = line.find(triple, i)
            if j < 0:
                break
            i, triple = j + 3, None
            continue
        m = _TOKEN.search(line, i)
        if not m or m.group(3):
            break
        i = m.end()
        if m.group(1):
            triple = m.group(1)
        elif m.group(4):
            depth += 1
        elif m.group(5):
            depth = max(0, depth - 1)
    state[0], state[1] = depth, triple


def _block(lines, start):
    """The def/class block starting at lines[start] (its decorators first), as inspect.getblock
    finds it, without tokenizing (tokenize was most of a report's time): brackets, strings and
    indentation. Anything else starting there (a lambda's line): that logical line."""
    def indent(line):
        return len(line) - len(line.lstrip(" \t"))

    base, state, i = indent(lines[start]), [0, None], start

    def logical_line():
        nonlocal i
        _scan(lines[i], state)
        i += 1
        while (state[0] or state[1]) and i < len(lines):
            _scan(lines[i], state)
            i += 1

    while i < len(lines) and lines[i].lstrip().startswith("@"):
        logical_line()
    if i >= len(lines):
        return lines[start:]
    head = lines[i].lstrip()
    logical_line()
    if not head.startswith(("def ", "async def ", "class ")):
        return lines[start:i]
    end = i
    while i < len(lines):
        line, stripped = lines[i], lines[i].strip()
        if not stripped:
            i += 1
        elif stripped.startswith("#"):  # a comment indented into the block belongs to it
            i += 1
            if indent(line) > base:
                end = i
        elif indent(line) <= base:
            break
        else:
            logical_line()
            end = i
    return lines[start:end]


def _source_block(filename, firstlineno):
    """The lines of the function that starts at firstlineno (None when the file is not readable)."""
    lines = linecache.getlines(filename)
    if not lines or firstlineno < 1 or firstlineno > len(lines):
        return None
    return [line.rstrip("\n") for line in _block(lines, firstlineno - 1)]


def _lines(text):
    return [line for line in text.split("\n") if line] if text else []


def _records(text):
    """The hook's lists: each item ends with \\x1e (a guard's text may span lines)."""
    return text.split("\x1e")[:-1] if text else []


def _code_record(fields, codes, order):
    key = fields["code"]
    rec = codes.get(key)
    if rec is None:
        # A continuation (the rest of a function after a graph break) is a code object of its own.
        qualname = fields["qualname"] + (" (continuation after a graph break)" if fields.get("continuation") == "1" else "")
        rec = {"id": len(order), "qualname": qualname, "filename": fields["filename"],
               "firstlineno": int(fields["firstlineno"]), "breaks": [], "entries": [],
               "recompiles": [], "limit": None}
        rec["source"] = _source_block(rec["filename"], rec["firstlineno"])
        codes[key] = rec
        order.append(rec)
    return rec


def _backend(program_text):
    m = re.search(r"^backend (\w+)", program_text, re.M)
    return m.group(1) if m else ""


def _entry(fields, ms, graph_events):
    """One compiled entry from its `entry` event and the events of its graph id."""
    e = {"index": int(fields["entry"]), "graph_text": fields["graph_text"],
         "input_sources": _records(fields["input_sources"]), "node_locations": _records(fields["node_locations"]),
         "guards": _records(fields["guards"]), "program_text": fields["program_text"],
         "backend": _backend(fields["program_text"]) or fields.get("requested_backend", ""),
         "kernels": [], "timings": [], "compile_ms": ms, "ready_ms": None, "recompile_reason": None}
    start = float(fields["start_ms"])
    code_by_name = {}
    for kind, f, ev_ms in graph_events:
        if kind == "pass":
            e["timings"].append({"pass": f["name"], "ms": ev_ms})
        elif kind == "kernel":
            e["kernels"].append({"name": f["name"], "loop_ir": f["loop_ir"],
                                 "values": [int(v) for v in f["values"].split()],
                                 "locations": _lines(f["locations"]), "code": None, "code_language": ""})
        elif kind == "kernel_code":
            code_by_name.setdefault(f["name"], []).append((f["language"], f["code"]))
        elif kind == "ready" and e["ready_ms"] is None:
            e["ready_ms"] = ev_ms - start
    # A graph's programs name their kernels k0, k1...: the n-th code of a name is the n-th kernel's.
    for k in e["kernels"]:
        queue = code_by_name.get(k["name"])
        if queue:
            k["code_language"], k["code"] = queue.pop(0)
    return e


def collect():
    """Everything the journal holds, as report_html.render's dict."""
    events, dropped = _C.journal_events()
    by_graph = {}
    for graph, kind, fields, ms in events:
        if graph >= 0 and kind not in ("entry", "break", "recompile", "limit"):
            by_graph.setdefault(graph, []).append((kind, fields, ms))
    codes, order = {}, []
    for graph, kind, fields, ms in events:
        if kind not in ("entry", "break", "recompile", "limit"):
            continue
        rec = _code_record(fields, codes, order)
        if kind == "entry":
            e = _entry(fields, ms, by_graph.get(graph, []))
            e["graph_id"] = graph
            e["recompile_reason"] = next((r["guard"] for r in rec["recompiles"] if r["entry"] == e["index"]), None)
            rec["entries"].append(e)
        elif kind == "break":
            b = {"filename": fields["break_file"], "lineno": int(fields["break_line"]),
                 "reason": fields["reason"], "continued": fields["continued"] == "1"}
            same = next((x for x in rec["breaks"] if all(x[k] == b[k] for k in b)), None)
            if same:  # met again by a recompile: one site, counted
                same["count"] += 1
            else:
                rec["breaks"].append(dict(b, count=1))
        elif kind == "recompile":
            rec["recompiles"].append({"entry": int(fields["entry"]), "guard": fields["guard"]})
        else:
            rec["limit"] = fields["text"]
    omitted = []
    if dropped:
        omitted.append(f"{dropped} journal events past its bound of 256 MB were not kept")
    if not _C.journal_is_on() and not events:
        omitted.append("nothing was recorded: set FASTDYN_REPORT=out.html, run `fastdyn run --report out.html`, "
                       "or call fastdyn.start_report() before the code runs")
    from .api import stats
    return {
        "source_lines": _source_lines(order),
        "title": "fastdyn report: " + " ".join(sys.argv[:3]),
        "created": datetime.datetime.now().isoformat(timespec="seconds"),
        "argv": list(sys.argv),
        "fastdyn": {"python": sys.version.split()[0], "torch": torch.__version__,
                    "threads": torch.get_num_threads(), "pid": os.getpid()},
        "stats": stats(),
        "codes": order,
        "check": _check(order),
        "omitted": omitted,
    }


def _source_lines(codes, bound=20000):
    """The text of every line a kernel or a break points at ("file.py:12" -> text), so that the
    page shows inlined library lines without reading files."""
    out = {}
    wanted = [b["filename"] + ":" + str(b["lineno"]) for c in codes for b in c["breaks"]]
    wanted += [loc for c in codes for e in c["entries"] for k in e["kernels"] for loc in k["locations"]]
    for loc in wanted:
        if len(out) >= bound:
            break
        filename, _, line = loc.rpartition(":")
        if loc not in out and line.isdigit():
            text = linecache.getline(filename, int(line))
            if text:
                out[loc] = text.rstrip("\n")
    return out


def _check(codes):
    """Accuracy mode's findings (FASTDYN_CHECK=1), with each divergence's entry located."""
    found = _C.check_divergences()
    if not _C.check_enabled() and not found:
        return None
    where = {e["graph_id"]: (c["id"], e["index"]) for c in codes for e in c["entries"]}
    divergences = []
    for d in found:
        code_id, entry = where.get(d.get("graph", -1), (-1, -1))
        divergences.append({"code_id": code_id, "entry": entry, "kernel": d["kernel"], "value": d["value"],
                            "dtype": d["dtype"], "max_abs_err": d["max_abs_err"], "max_rel_err": d["max_rel_err"],
                            "atol": d["atol"], "rtol": d["rtol"], "detail": d["detail"], "label": d.get("label", ""),
                            "inputs": d.get("inputs"), "inputs_file": None})
    return {"graphs_checked": _C.checked_graphs(), "divergences": divergences}


def _save_inputs(data, path):
    """Saves each divergence's call inputs beside the report (torch.load gives the list back)."""
    check = data.get("check")
    if not check:
        return
    for n, d in enumerate(check["divergences"]):
        inputs = d.pop("inputs", None)
        if inputs is None:
            continue
        name = f"{os.path.splitext(path)[0]}.inputs{n}.pt"
        torch.save(list(inputs), name)
        d["inputs_file"] = name


def report(path=None):
    """Writes the report of what was recorded (start_report, FASTDYN_REPORT) to `path` (default
    FASTDYN_REPORT, else fastdyn_report.html) and returns the path."""
    from . import report_html
    path = os.fspath(path or os.environ.get(_REPORT_ENV) or "fastdyn_report.html")
    from .api import synchronize
    synchronize()  # background compiles record their kernels' code
    data = collect()
    if not data["codes"] and not _C.journal_is_on():
        warnings.warn("fastdyn.report: nothing was recorded; call fastdyn.start_report() before running "
                      "the code (or set FASTDYN_REPORT)", stacklevel=2)
    _save_inputs(data, path)
    # NB: rendering allocates many short-lived containers; in a process holding a model, each
    # collection they trigger walks the whole heap (50 ms and more on GPT-2's): none is needed.
    collecting = gc.isenabled()
    gc.disable()
    try:
        report_html.write(data, path)
    finally:
        if collecting:
            gc.enable()
    return path


def _report_at_exit():
    try:
        path = report()
        print(f"fastdyn: report written to {path}", file=sys.stderr)
    except Exception as e:  # the program's own exit status must not change
        print(f"fastdyn: writing the report failed: {e!r}", file=sys.stderr)


def install_from_environment():
    """FASTDYN_REPORT=path: record from now on and write the report when the process exits."""
    if os.environ.get(_REPORT_ENV):
        start_report()
        atexit.register(_report_at_exit)
