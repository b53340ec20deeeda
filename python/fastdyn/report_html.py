"""fastdyn's HTML report (issue 23): one self-contained page of what fastdyn did.

The native side collects a plain dict (code objects with their source, graph breaks, compiled
entries with graphs, guards, programs, kernels and timings, recompiles, the accuracy check);
`render(data)` turns it into one HTML file that needs nothing else: no network, no fonts, no
external CSS or JS (a small inline script only opens collapsed sections; the page reads fine with
JS off). Graphs are drawn as inline SVG by a layered layout (codegen/graph/graph_picture.h). Every text from the data
is escaped. `max_bytes` bounds the output: the biggest parts are cut step by step (generated code,
loop IR, graph pictures, guard lists, ...) and each cut is named in a visible `<p class="omitted">`.

    from fastdyn import report_html
    report_html.write(data, "fastdyn_report.html")
"""
import functools
import os
import re

from . import _C

__all__ = ["render", "write", "fix_for", "recompile_fix_for", "FIXES", "RECOMPILE_FIXES"]

# --------------------------------------------------------------------------------------------
# Fix suggestions: the first regex that matches a break reason gives its fix. No match, no fix.
FIXES = [
    (r"built-in function print|\bprint\b|logging|logger|warnings?\.warn|acquire of _thread",
     "Printing or logging inside compiled code breaks the graph: move it out of the hot function, "
     "or call it after the compiled region."),
    (r"Tensor\.(item|tolist)\(\)|<class '(int|float|bool)'>|\.item\(\)",
     "Reading a tensor's value into a Python number ends the graph: keep it a tensor "
     "(torch.where, torch.clamp, tensor arithmetic) or read it after the compiled region."),
    (r"branch depends on a tensor|__bool__|\bbool\(|control flow",
     "Python control flow on a tensor value: avoid if/while on tensor values; compute both sides "
     "and select with torch.where (or a mask)."),
    (r"numpy|\bnp\.",
     "NumPy is not traced: use the torch equivalent, or do the NumPy work outside the compiled "
     "function."),
    (r"depends on tensor data|data[- ]dependent",
     "The result depends on tensor data (shape or value): use a fixed-shape form (e.g. torch.where "
     "with a mask instead of nonzero / boolean indexing), or do it outside the compiled function."),
    (r"requires_grad|no_grad|enable_grad|set_grad_enabled|grad mode",
     "Grad mode changes inside the function: use `torch.no_grad()` outside the loop / around the "
     "call instead of toggling it inside."),
    (r"\brandom\b",
     "Python's random module is not traced: use torch.rand / torch.randint, or draw the number "
     "outside and pass it in."),
    (r"TorchFunctionMode|TorchDispatchMode",
     "fastdyn does not compile while a torch function/dispatch mode is active: leave the mode "
     "before calling the hot function."),
    (r"is not supported|unsupported",
     "fastdyn cannot trace this call: move it out of the compiled function, or into a helper "
     "marked @fastdyn.skip (which runs eagerly)."),
]

# What to do about a recompile, from the guard that failed (runtime/guards.cpp's descriptions).
RECOMPILE_FIXES = [
    (r"size \[[^\]]*\] != \[",
     "A size changed. fastdyn makes a dim symbolic by itself after one change (automatic dynamic); "
     "to start that way, call fastdyn.mark_dynamic(x, dim) or jit(..., dynamic=True)."),
    (r"dtype \w+ != \w+",
     "A dtype changed: each dtype is its own entry. Cast before the call if the dtypes should agree."),
    (r"device \S+ != ",
     "A device changed: each device is its own entry."),
    (r"requires_grad",
     "requires_grad changed: training and inference calls are separate entries (expected once each)."),
    (r"stride",
     "A layout changed (a transposed or sliced input): call .contiguous() before the call if the "
     "layouts should agree."),
    (r" == | != ",
     "A Python value the code read changed (a number, a flag): pass numbers that vary as tensors, "
     "or expect one entry per value."),
    (r" is <| is not ",
     "The code read an object that is a different one now (made anew per call?): hold it across "
     "calls, or keep the object out of the compiled function."),
]


def _first_fix(table, text):
    # re.search compiles a pattern at its first use (then re's cache holds it): a report with no
    # break or recompile compiles none of these tables' patterns (the renderer's import was 12 ms,
    # half of it compiling them, against a fast model's 76 ms compile: issue 23's 10% bound).
    for rx, fix in table:
        if re.search(rx, text or ""):
            return fix
    return None


def recompile_fix_for(guard):
    """What to do about a recompile whose failed guard reads `guard`, or None."""
    return _first_fix(RECOMPILE_FIXES, guard)

def fix_for(reason):
    """The fix text for a break reason, or None."""
    return _first_fix(FIXES, reason)


_SPECIAL = re.compile(r"[&<>\"']")


def esc_text(x):
    """esc(x) for an element's text (not an attribute's): quotes stay as they are, which is most of
    the escaping work on guards, source and generated code (GPT-2's guards hold 7,470 quotes)."""
    s = "" if x is None else str(x)
    if "&" in s or "<" in s or ">" in s:
        s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return s if s.isascii() else s.encode("ascii", "xmlcharrefreplace").decode("ascii")


def esc_texts(texts):
    """[esc_text(t) for t in texts], escaped as one string (most of a page's texts are the guards)."""
    texts = ["" if t is None else str(t) for t in texts]
    joined = "\0".join(texts)
    if not texts or joined.count("\0") != len(texts) - 1:   # a text holds the separator
        return [esc_text(t) for t in texts]
    return esc_text(joined).split("\0")


def esc(x):
    """html.escape(x, quote=True), without importing html (its entity tables cost 1.3 ms), and
    non-ASCII characters as character references: the page stays an ASCII string, which Python
    joins, searches and encodes at one byte a character (one "…" made all 530 KB of GPT-2's page
    two bytes a character)."""
    s = "" if x is None else str(x)
    if _SPECIAL.search(s):
        s = (s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
             .replace('"', "&quot;").replace("'", "&#x27;"))
    return s if s.isascii() else s.encode("ascii", "xmlcharrefreplace").decode("ascii")


def _num(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    return str(v) if isinstance(v, int) else f"{v:.4g}"


def _ms(v):
    return "?" if v is None else f"{v:.2f} ms"


def _ident(s):
    return re.sub(r"[^A-Za-z0-9_-]", "_", str(s))


# --------------------------------------------------------------------------------------------
# Size bound: each level cuts more; render() tries them in order until the page fits.
# (The classes here are plain slotted classes, not dataclasses: making four dataclasses was half of
# this module's import, which the first report() of a process pays.)
class Limits:
    """How much of each kind of text one size level keeps (None: all)."""
    __slots__ = ("gen_lines", "ir_lines", "node_cap", "guard_cap", "source_lines", "text_chars", "rows",
                 "max_entries", "max_codes")

    def __init__(self, gen_lines=None, ir_lines=None, node_cap=400, guard_cap=None, source_lines=None,
                 text_chars=None, rows=None, max_entries=None, max_codes=None):
        self.gen_lines = gen_lines        # generated code lines per kernel (0: left out)
        self.ir_lines = ir_lines          # loop IR / program text lines
        self.node_cap = node_cap          # ops drawn per graph
        self.guard_cap = guard_cap        # guards listed per entry
        self.source_lines = source_lines  # source lines shown per code object
        self.text_chars = text_chars      # any other single text
        self.rows = rows                  # rows of any other list (breaks, stats, kernels, ...)
        self.max_entries = max_entries    # entries per code object
        self.max_codes = max_codes        # code objects

    def replace(self, **changes):
        """A copy with `changes` (dataclasses.replace)."""
        return Limits(**{**{k: getattr(self, k) for k in self.__slots__}, **changes})


LEVELS = [
    Limits(),
    Limits(gen_lines=200),
    Limits(gen_lines=40, ir_lines=300),
    Limits(gen_lines=40, ir_lines=60, node_cap=150),
    Limits(gen_lines=20, ir_lines=40, node_cap=150, guard_cap=20, source_lines=400,
           text_chars=2000, rows=200),
    Limits(gen_lines=0, ir_lines=0, node_cap=40, guard_cap=5, source_lines=100, text_chars=300,
           rows=30, max_entries=4),
]


class Ctx:
    """One rendering at one size level: its limits, what it cut, and caches across levels."""
    __slots__ = ("lim", "cuts", "diverged", "svgs", "lines")

    def __init__(self, lim, svgs=None, lines=None):
        self.lim = lim
        self.cuts = {}                 # what -> [times, amount left out]
        self.diverged = {}             # (code id, entry, kernel) -> divergence
        self.svgs = {} if svgs is None else svgs      # graph pictures, kept across size levels
        self.lines = {} if lines is None else lines   # "file.py:12" -> that line's text (data["source_lines"])

    def cut(self, what, amount):
        """Record that `amount` `what` (e.g. 'source lines') were left out."""
        c = self.cuts.setdefault(what, [0, 0])
        c[0] += 1
        c[1] += amount

    def text(self, s):
        s = "" if s is None else str(s)
        n = self.lim.text_chars
        if n is not None and len(s) > n:
            self.cut("characters of long texts (reasons, guards, names)", len(s) - n)
            return s[:n] + f" ... [{len(s) - n:,} characters left out]"
        return s

    def rows(self, items, what):
        items = list(items or [])
        n = self.lim.rows
        if n is not None and len(items) > n:
            self.cut(what, len(items) - n)
            return items[:n], len(items) - n
        return items, 0

    def notes(self):
        return [f"{amount:,} {what} left out" + (f" (in {times:,} places)" if times > 1 else "")
                for what, (times, amount) in self.cuts.items()]


def clip_lines(text, n, ctx, what):
    """(head of text, note or ''): the first n lines (and at most n*200 characters)."""
    text = text or ""
    if n is None or len(text) <= n * 200 and text.rstrip("\n").count("\n") < n:
        return text, ""
    head = "\n".join(text.split("\n", n)[:n])[: n * 200]
    lines = text.count("\n") + 1 - (head.count("\n") + 1 if head else 0)
    ctx.cut(f"characters of {what}", len(text) - len(head))
    return head, (f"... {lines:,} more lines ({len(text) - len(head):,} characters) left out "
                  "(report size bound)")


def pre(cls, text, ctx, limit, what):
    body, note = clip_lines(text, limit, ctx, what)
    tail = f'\n<span class="cut">{esc(note)}</span>' if note else ""
    return f'<pre class="{cls}">{esc_text(body)}{tail}</pre>'


# --------------------------------------------------------------------------------------------
# The graph picture: read from the graph text, laid out and drawn as SVG in C++
# (codegen/graph/graph_picture.h), which was 70% of report()'s time here in Python.
NW, NH = _C.graph_picture_box()   # a node's box, px


def graph_svg(entry, code_id, ctx):
    """(svg html, note html) for an entry's graph (drawn once per node cap)."""
    key = (code_id, entry.get("index"), ctx.lim.node_cap)
    if key not in ctx.svgs:
        kernels = [(str(k.get("name", "?")), [v for v in k.get("values") or [] if isinstance(v, int)],
                    (code_id, entry.get("index"), str(k.get("name", "?"))) in ctx.diverged)
                   for k in entry.get("kernels") or []]
        ctx.svgs[key] = _C.graph_svg(
            entry.get("graph_text") or "", [str(s) for s in entry.get("input_sources") or []],
            [str(s) for s in entry.get("node_locations") or []], kernels, ctx.lim.node_cap,
            "" if code_id is None else str(code_id), "" if entry.get("index") is None else str(entry.get("index")),
            f"arrow-c{_ident(code_id)}-e{_ident(entry.get('index'))}")
    svg, left, total = ctx.svgs[key]
    note = ""
    if left:
        ctx.cut("graph ops not drawn", left)
        note = (f'<p class="note graph-cap">This graph has {total:,} ops; only the first '
                f'{ctx.lim.node_cap:,} are drawn.</p>')
    return svg, note


LEGEND = ('<p class="legend"><span class="sw input">input</span><span class="sw fused">fused op'
          '</span><span class="sw plain">op (not fused)</span><span class="sw extern">extern op'
          '</span><span class="sw output">output</span><span class="sw kernel">kernel</span></p>')


# --------------------------------------------------------------------------------------------
# Sections.
@functools.lru_cache(maxsize=4096)
def _same_file(a, b):
    if not a or not b:
        return False
    return os.path.normpath(a) == os.path.normpath(b) or (
        os.path.basename(a) == os.path.basename(b) and not (os.path.isabs(a) and os.path.isabs(b)))


def _loc_link(loc, code, shown):
    """A 'file.py:12' location as a link to the marked source line when it is shown."""
    f, _, line = str(loc).rpartition(":")
    if line.isdigit() and _same_file(f, code.get("filename")) and int(line) in shown:
        return f'<a href="#code{_ident(code.get("id"))}-L{line}">{esc(loc)}</a>'
    return esc(loc)


def _line_text(loc, ctx, shown=(), code=None):
    """The text of a source line outside the code object's own source (inlined library code),
    when the collector read it: the line a kernel's op or a break came from, at a glance."""
    f, _, line = str(loc).rpartition(":")
    if code is not None and line.isdigit() and _same_file(f, code.get("filename")) and int(line) in shown:
        return ""  # linked to the marked source instead
    text = ctx.lines.get(str(loc))
    return f' <code class="srcline">{esc(ctx.text(text.strip()))}</code>' if text else ""


def _break_text(b):
    fix = fix_for(b.get("reason"))
    how = "a continuation runs the rest" if b.get("continued") else "the frame ran eagerly"
    out = f'<div class="reason">&#9888; {esc(b.get("reason"))} <em>({how})</em></div>'
    return out + (f'<div class="fix">fix: {esc(fix)}</div>' if fix else "")


def source_html(code, ctx):
    """The source with line numbers and break markers, then breaks elsewhere; returns
    (html, set of line numbers shown)."""
    cid, first = code.get("id"), int(code.get("firstlineno") or 1)
    src = code.get("source")
    lines = list(src) if src else []
    if ctx.lim.source_lines is not None and len(lines) > ctx.lim.source_lines:
        ctx.cut("source lines", len(lines) - ctx.lim.source_lines)
        lines = lines[: ctx.lim.source_lines]
    shown = set(range(first, first + len(lines)))
    breaks, _ = ctx.rows(code.get("breaks"), "graph breaks")
    breaks = [dict(b, reason=ctx.text(b.get("reason"))) for b in breaks]
    here, elsewhere = {}, []
    for b in breaks:
        if _same_file(b.get("filename"), code.get("filename")) and b.get("lineno") in shown:
            here.setdefault(b["lineno"], []).append(b)
        else:
            elsewhere.append(b)
    hot = set()
    for e in code.get("entries") or []:
        for loc in (e.get("node_locations") or []):
            f, _, ln = str(loc).rpartition(":")
            if ln.isdigit() and _same_file(f, code.get("filename")):
                hot.add(int(ln))
    out = []
    if src:
        out.append(f'<table class="source" data-code="{esc(cid)}">')
        for i, text in enumerate(lines):
            ln = first + i
            bs = here.get(ln, [])
            cls = "src-line" + (" has-break" if bs else "") + (" hot" if ln in hot else "")
            marks = "".join(f'<span class="break" data-line="{ln}" title="{esc(b.get("reason"))}">'
                            f'&#9679;</span>' for b in bs)
            out.append(f'<tr id="code{_ident(cid)}-L{ln}" class="{cls}"><td class="ln">{ln}</td>'
                       f'<td class="mark">{marks}</td><td class="text">{esc_text(ctx.text(text).rstrip())}'
                       f'</td></tr>')
            for b in bs:
                out.append(f'<tr class="break-note"><td></td><td></td><td>{_break_text(b)}'
                           f'</td></tr>')
        out.append('</table><p class="legend muted"><span class="brk-sym">&#9679;</span> graph break '
                   '(hover for the reason) &#183; <span class="hotmark"></span> line with ops in a graph'
                   '</p>')
        if len(lines) < len(src):
            out.append(f'<p class="note">&#8230; {len(src) - len(lines):,} more source lines left out.</p>')
    else:
        out.append('<p class="note">Source not available.</p>')
    if elsewhere:
        out.append('<h4>Breaks at other lines (inlined code)</h4><ul class="breaks-elsewhere">')
        for b in elsewhere:
            where = f'{b.get("filename")}:{b.get("lineno")}'
            out.append(f'<li class="break" data-line="{esc(b.get("lineno"))}" '
                       f'data-file="{esc(b.get("filename"))}" title="{esc(b.get("reason"))}">'
                       f'<code>{esc(where)}</code>{_line_text(where, ctx)}{_break_text(b)}</li>')
        out.append("</ul>")
    return "\n".join(out), shown


def kernel_html(kernel, code, entry, shown, ctx):
    cid, ei, name = code.get("id"), entry.get("index"), str(kernel.get("name", "?"))
    div = ctx.diverged.get((cid, ei, name))
    vals = ", ".join(f"%{v}" for v in kernel.get("values") or [])
    locs = "".join(f"<li>{_loc_link(l, code, shown)}{_line_text(l, ctx, shown, code)}</li>"
                   for l in kernel.get("locations") or [])
    out = [f'<details class="kernel-code{" diverged" if div else ""}" '
           f'id="code{_ident(cid)}-e{_ident(ei)}-{_ident(name)}" data-kernel="{esc(name)}"'
           f'{" open" if div else ""}>',
           f'<summary>kernel <b>{esc(name)}</b> <span class="muted">ops {esc(vals) or "&#8212;"}'
           f'</span></summary>']
    if div:
        out.append(f'<p class="warning">This kernel diverged from eager: max abs err '
                   f'{_num(div.get("max_abs_err"))} (atol {_num(div.get("atol"))}), max rel err '
                   f'{_num(div.get("max_rel_err"))} (rtol {_num(div.get("rtol"))}).</p>')
    out.append(f'<p>Source lines:</p><ul class="locations">{locs}</ul>' if locs else "<p>Source lines: unknown</p>")
    out.append("<h5>Loop IR</h5>" + pre("kernel-ir", kernel.get("loop_ir"), ctx, ctx.lim.ir_lines,
                                        "loop IR"))
    code_text, lang = kernel.get("code"), kernel.get("code_language") or ""
    if code_text is not None:
        out.append(f'<h5>Generated code {esc("(" + lang + ")" if lang else "")}</h5>')
        if ctx.lim.gen_lines == 0:
            n = code_text.count("\n") + 1
            ctx.cut("characters of generated code", len(code_text))
            out.append(f'<pre class="kernel-generated"><span class="cut">generated code left out '
                       f'({n:,} lines, {len(code_text):,} characters; report size bound)</span></pre>')
        else:
            out.append(pre("kernel-generated", code_text, ctx, ctx.lim.gen_lines,
                           "generated code"))
    out.append("</details>")
    return "\n".join(out)


def timings_html(entry, ctx):
    rows, _ = ctx.rows(entry.get("timings"), "timing rows")
    top = max((float(t.get("ms") or 0) for t in rows), default=0) or 1
    out = ['<table class="timings"><tr><th>pass</th><th>ms</th><th></th></tr>']
    for t in rows:
        ms = float(t.get("ms") or 0)
        out.append(f'<tr><td>{esc(ctx.text(t.get("pass")))}</td><td class="num">{ms:.3f}</td>'
                   f'<td class="barcell"><span class="bar" style="width:{100 * ms / top:.1f}%">'
                   f'</span></td></tr>')
    out.append("</table>")
    out.append(f'<p class="compile-time">compile (calling thread): {_ms(entry.get("compile_ms"))}'
               f' &#183; kernels ready: {_ms(entry.get("ready_ms"))}</p>')
    return "\n".join(out)


def entry_html(entry, code, shown, open_, ctx):
    """An entry's section as a list of lines (see _page)."""
    cid, ei = code.get("id"), entry.get("index")
    kernels = entry.get("kernels") or []
    out = [f'<details class="entry" id="code{_ident(cid)}-e{_ident(ei)}" data-code="{esc(cid)}" '
           f'data-entry="{esc(ei)}"{" open" if open_ else ""}>',
           f'<summary>entry {esc(ei)} &#183; {esc(entry.get("backend") or "?")} &#183; '
           f'{len(kernels)} kernel(s) &#183; compile {_ms(entry.get("compile_ms"))}</summary>']
    if entry.get("recompile_reason"):
        out.append(f'<p class="recompile-reason">recompiled because: <code>'
                   f'{esc(ctx.text(entry["recompile_reason"]))}</code></p>')
    srcs, _ = ctx.rows(entry.get("input_sources"), "input sources")
    if srcs:
        out.append('<h4>Inputs</h4><table class="inputs"><tr><th>#</th><th>read from</th></tr>')
        out += [f'<tr><td>{i}</td><td><code>{esc(ctx.text(s))}</code></td></tr>'
                for i, s in enumerate(srcs)]
        out.append("</table>")
    if (entry.get("graph_text") or "").strip():
        svg, note = graph_svg(entry, cid, ctx)
        out += ["<h4>Graph</h4>", LEGEND, f'<div class="graph-wrap">{svg}</div>', note]
    else:
        out.append('<p class="note">No graph in this entry.</p>')
    guards = list(entry.get("guards") or [])
    cap = ctx.lim.guard_cap
    out.append(f'<h4>Guards ({len(guards)})</h4><ul class="guards">')
    out += [f'<li class="guard"><code>{g}</code></li>' for g in esc_texts([ctx.text(g) for g in guards[:cap]])]
    out.append("</ul>")
    if cap is not None and len(guards) > cap:
        ctx.cut("guards", len(guards) - cap)
        out.append(f'<p class="note">&#8230; {len(guards) - cap:,} more guards left out.</p>')
    if entry.get("program_text"):
        out.append('<details class="program"><summary>Program (' + esc(entry.get("backend")) +
                   ')</summary>' + pre("program", entry["program_text"], ctx, ctx.lim.ir_lines,
                                       "program text") + "</details>")
    ks, _ = ctx.rows(kernels, "kernels")
    if ks:
        out.append(f'<h4>Kernels ({len(kernels)})</h4>')
        out += [kernel_html(k, code, entry, shown, ctx) for k in ks]
    out.append("<h4>Timings</h4>" + timings_html(entry, ctx))
    out.append("</details>")
    return out


def code_html(code, i, ctx):
    """A code object's section as a list of lines (see _page)."""
    cid = code.get("id")
    entries = list(code.get("entries") or [])
    recs = code.get("recompiles") or []
    breaks = code.get("breaks") or []
    out = [f'<details class="code" id="code{_ident(cid)}" data-code="{esc(cid)}"'
           f'{" open" if i < 3 else ""}>',
           f'<summary>{esc(ctx.text(code.get("qualname")))} <span class="muted">'
           f'{esc(ctx.text(code.get("filename")))}:{esc(code.get("firstlineno"))} &#183; '
           f'{len(entries)} entr{"y" if len(entries) == 1 else "ies"} &#183; {len(breaks)} break(s) &#183; '
           f'{len(recs)} recompile(s)</span>'
           f'{" <span class=badge>recompile limit</span>" if code.get("limit") else ""}</summary>']
    if code.get("limit"):
        out.append(f'<p class="limit warning">&#9888; {esc(ctx.text(code["limit"]))}</p>')
    src, shown = source_html(code, ctx)
    out += ["<h3>Source</h3>", src]
    if recs:
        rows, left = ctx.rows(recs, "recompile rows")
        out.append('<h3>Recompiles</h3><table class="recompiles"><tr><th>entry</th>'
                   '<th>guard that failed</th><th>what to do</th></tr>')
        out += [f'<tr class="recompile" data-entry="{esc(r.get("entry"))}"><td>'
                f'<a href="#code{_ident(cid)}-e{_ident(r.get("entry"))}">{esc(r.get("entry"))}</a>'
                f'</td><td><code>{esc(ctx.text(r.get("guard")))}</code></td>'
                f'<td class="fix">{esc(recompile_fix_for(r.get("guard")) or "")}</td></tr>' for r in rows]
        out.append("</table>" + (f'<p class="note">&#8230; {left:,} more left out.</p>' if left else ""))
    n = ctx.lim.max_entries
    if n is not None and len(entries) > n:
        ctx.cut("compiled entries", len(entries) - n)
        out.append(f'<p class="note">Only the first {n} of {len(entries)} entries are shown.</p>')
        entries = entries[:n]
    if entries:
        out.append("<h3>Compiled entries</h3>")
        for j, e in enumerate(entries):
            out += entry_html(e, code, shown, j < 2, ctx)
    out.append("</details>")
    return out


def _kv_table(cls, d, ctx):
    rows, left = ctx.rows((d or {}).items(), "table rows")
    out = [f'<table class="{cls}">']
    out += [f'<tr><th>{esc(ctx.text(k))}</th><td class="num">{esc(ctx.text(_num(v)))}</td></tr>'
            for k, v in rows]
    return "\n".join(out) + "</table>" + (f'<p class="note">&#8230; {left} more rows.</p>' if left else "")


def header_html(data, ctx):
    argv = " ".join(str(a) for a in data.get("argv") or [])
    return (f'<header><h1>{esc(ctx.text(data.get("title") or "fastdyn report"))}</h1>'
            f'<p class="meta">created {esc(ctx.text(data.get("created")))} &#183; '
            f'<code>{esc(ctx.text(argv))}</code></p>'
            + _kv_table("fastdyn-info", data.get("fastdyn"), ctx) + "</header>")


def summary_html(data, ctx):
    codes = data.get("codes") or []
    entries = [e for c in codes for e in c.get("entries") or []]
    counts = [("code objects", len(codes)),
              ("graphs", sum(1 for e in entries if (e.get("graph_text") or "").strip())),
              ("graph breaks", sum(len(c.get("breaks") or []) for c in codes)),
              ("recompiles", sum(len(c.get("recompiles") or []) for c in codes)),
              ("kernels", sum(len(e.get("kernels") or []) for e in entries)),
              ("recompile limits hit", sum(1 for c in codes if c.get("limit")))]
    out = ['<section id="summary"><h2>Summary</h2><div class="side"><table class="counts">']
    out += [f'<tr data-count="{esc(k)}"><th>{esc(k)}</th><td class="num">{v}</td></tr>'
            for k, v in counts]
    out.append("</table>")
    out.append(_kv_table("stats", data.get("stats"), ctx) + "</div></section>")
    return "\n".join(out)


def toc_html(codes, ctx):
    out = ['<nav id="toc"><h2>Code objects</h2><ol>']
    for c in codes:
        bad = " <span class=badge>limit</span>" if c.get("limit") else ""
        out.append(f'<li><a href="#code{_ident(c.get("id"))}">{esc(ctx.text(c.get("qualname")))}'
                   f'</a> <span class="muted">{esc(ctx.text(os.path.basename(str(c.get("filename") or ""))))}'
                   f':{esc(c.get("firstlineno"))} &#183; {len(c.get("entries") or [])} entr(ies), '
                   f'{len(c.get("breaks") or [])} break(s), {len(c.get("recompiles") or [])} '
                   f'recompile(s)</span>{bad}</li>')
    return "\n".join(out) + "</ol></nav>"


def check_html(check, codes, ctx):
    names = {c.get("id"): c.get("qualname") for c in codes}
    divs, left = ctx.rows(check.get("divergences"), "divergence rows")
    out = ['<section id="check"><h2>Accuracy check</h2>',
           f'<p>graphs checked: <b>{esc(check.get("graphs_checked"))}</b> &#183; diverging: '
           f'<b>{len(check.get("divergences") or [])}</b></p>']
    if not divs:
        out.append('<p class="ok">No kernel diverged from eager.</p></section>')
        return "\n".join(out)
    out.append('<table class="divergences"><tr><th>code</th><th>entry</th><th>kernel</th>'
               '<th>value</th><th>dtype</th><th>max abs err / atol</th><th>max rel err / rtol</th>'
               '<th>inputs file</th><th>detail</th></tr>')
    for d in divs:
        cid, ei, k = d.get("code_id"), d.get("entry"), str(d.get("kernel"))
        out.append(
            f'<tr class="divergence" data-kernel="{esc(k)}" data-code="{esc(cid)}" '
            f'data-entry="{esc(ei)}"><td><a href="#code{_ident(cid)}">'
            f'{esc(ctx.text(names.get(cid, cid)))}</a></td><td>{esc(ei)}</td>'
            f'<td><a href="#code{_ident(cid)}-e{_ident(ei)}-{_ident(k)}">{esc(k)}</a></td>'
            f'<td>%{esc(d.get("value"))}</td><td>{esc(d.get("dtype"))}</td>'
            f'<td class="num">{_num(d.get("max_abs_err"))} / {_num(d.get("atol"))}</td>'
            f'<td class="num">{_num(d.get("max_rel_err"))} / {_num(d.get("rtol"))}</td>'
            f'<td><code>{esc(ctx.text(d.get("inputs_file") or "&#8212;"))}</code></td>'
            f'<td>{esc(ctx.text(d.get("detail")))}</td></tr>')
    out.append("</table>" + (f'<p class="note">&#8230; {left} more.</p>' if left else "") + "</section>")
    return "\n".join(out)


def omitted_html(notes, anchor):
    if not notes:
        return ""
    items = "".join(f'<p class="omitted">{esc(n)}</p>' for n in notes)
    return f'<section class="omitted-notes" id="{anchor}"><h2>Left out</h2>{items}</section>'


# --------------------------------------------------------------------------------------------
CSS = """
:root{--fg:#1d2330;--muted:#5b6475;--line:#d8dde6;--panel:#f5f7fa;--brk:#c62828;--brkbg:#fdecea}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
 color:var(--fg);margin:0 auto;max-width:1320px;padding:16px 24px}
code,pre,.source,svg.graph text{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,
 "DejaVu Sans Mono","Liberation Mono",monospace}
code{font-size:12.5px} pre{font-size:12px;background:var(--panel);border:1px solid var(--line);
 border-radius:6px;padding:8px 10px;overflow:auto;max-height:420px;margin:6px 0}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;border-bottom:1px solid var(--line);
 padding-bottom:4px;margin:26px 0 8px}h3{font-size:15px;margin:16px 0 6px}h4{font-size:14px;
 margin:14px 0 4px}h5{font-size:13px;margin:10px 0 2px;color:var(--muted)}
table{border-collapse:collapse;margin:6px 0}th,td{border:1px solid var(--line);padding:3px 8px;
 text-align:left;vertical-align:top}th{background:var(--panel);font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.muted,.meta{color:var(--muted);font-weight:normal}.note{color:var(--muted);font-style:italic}
.side{display:flex;gap:24px;align-items:flex-start;flex-wrap:wrap}
a{color:#1557b0}summary{cursor:pointer}
details.code{border:1px solid var(--line);border-radius:8px;padding:6px 14px;margin:14px 0}
details.code>summary{font-size:16px;font-weight:600;padding:4px 0}
details.entry{border-left:3px solid #90a4c8;padding:2px 0 2px 12px;margin:14px 0}
details.entry>summary{font-weight:600;font-size:14.5px}
details.kernel-code{border:1px solid var(--line);border-radius:6px;padding:4px 10px;margin:6px 0}
details.kernel-code.diverged,tr.divergence td{background:#fff1f0}
table.source{border:1px solid var(--line);border-radius:6px;width:100%;font-size:12.5px}
table.source td{border:none;padding:0 6px}table.source td.ln{color:var(--muted);text-align:right;
 width:1%;white-space:nowrap;user-select:none}table.source td.mark{width:1%}
table.source td.text{white-space:pre-wrap}tr.hot td.ln{border-left:3px solid #90a4c8}
tr.has-break td{background:var(--brkbg)}span.break,.brk-sym{color:var(--brk);font-weight:700;cursor:help}
tr.break-note td{background:var(--brkbg);font-family:system-ui,sans-serif;padding:0 6px 6px}
.hotmark{display:inline-block;width:3px;height:12px;background:#90a4c8}
.reason{color:var(--brk)}.fix{color:#1b5e20}ul.breaks-elsewhere li{margin:4px 0}
.omitted,.warning{background:#fff4d6;border:1px solid #f0c36d;border-radius:6px;padding:6px 10px}
.limit{font-weight:600}.ok{color:#1b5e20}.cut{color:#8a5a00;font-style:italic}
.badge{background:#c62828;color:#fff;border-radius:9px;padding:0 7px;font-size:11px;margin-left:6px}
.recompile-reason{background:#eef3fb;border-radius:6px;padding:4px 8px}
ul.guards{margin:4px 0;padding-left:20px;max-height:320px;overflow:auto}li.guard{margin:1px 0}
ul.locations{margin:2px 0 6px;padding-left:20px}code.srcline{color:#555;margin-left:8px;white-space:pre}
table.timings td.barcell{width:260px}span.bar{display:inline-block;height:10px;min-width:1px;
 background:#5c8ddb;border-radius:2px}
.graph-wrap{overflow:auto;border:1px solid var(--line);border-radius:6px;
 background:#fcfdff}
svg.graph text{font-size:11px;text-anchor:middle;fill:#1d2330}svg.graph .l2{fill:#5b6475}
svg.graph g.node rect{stroke:#5b6475;stroke-width:1;fill:#fff}
svg.graph g.input rect{fill:#e3f2e5;stroke:#2e7d32}svg.graph g.output rect{fill:#e4e9f7;stroke:#283593}
svg.graph g.fused rect{fill:#dcebff;stroke:#1565c0}svg.graph g.extern rect{fill:#ffe6cc;stroke:#c25e00;
 stroke-width:1.6}svg.graph g.opaque rect{fill:#eee;stroke-dasharray:3 2}
svg.graph g.kernel rect{fill:#eef5ff;stroke:#7ea6e0;stroke-dasharray:5 3}
svg.graph g.kernel text{fill:#1565c0;font-weight:700;text-anchor:start}
svg.graph g.kernel.diverged rect{fill:#ffe9e7;stroke:#c62828}
svg.graph path.edge{fill:none;stroke:#7a8599;stroke-width:1.2}svg.graph .arrowhead{fill:#7a8599}
.legend .sw{display:inline-block;border:1px solid #5b6475;border-radius:4px;padding:0 6px;
 margin-right:6px;font-size:12px}.sw.input{background:#e3f2e5}.sw.output{background:#e4e9f7}
.sw.fused{background:#dcebff}.sw.extern{background:#ffe6cc}.sw.kernel{background:#eef5ff;
 border-style:dashed}#toolbar button{margin-right:6px}
"""

JS = """
function fdOpen(id){var e=document.getElementById(id);while(e){if(e.tagName==='DETAILS')e.open=true;
e=e.parentElement;}}
window.addEventListener('hashchange',function(){fdOpen(decodeURIComponent(location.hash.slice(1)));});
document.addEventListener('click',function(ev){var a=ev.target.closest&&ev.target.closest('a[href^="#"]');
if(a)fdOpen(decodeURIComponent(a.getAttribute('href').slice(1)));});
if(location.hash)fdOpen(decodeURIComponent(location.hash.slice(1)));
(function(){var t=document.getElementById('toolbar');if(!t)return;[['expand all',true],
['collapse all',false]].forEach(function(p){var b=document.createElement('button');b.textContent=p[0];
b.onclick=function(){document.querySelectorAll('details').forEach(function(d){d.open=p[1];});};
t.appendChild(b);});})();
"""


def _page(data, ctx):
    """The page's text. The sections give lists of lines that are joined here, once: a page
    can be megabytes, and each join of a big part would copy it again (fresh memory: page
    faults)."""
    codes = list(data.get("codes") or [])
    check = data.get("check")
    if check:
        for d in check.get("divergences") or []:
            ctx.diverged.setdefault((d.get("code_id"), d.get("entry"), str(d.get("kernel"))), d)
    n = ctx.lim.max_codes
    if n is not None and len(codes) > n:
        ctx.cut("code objects", len(codes) - n)
    shown = codes if n is None else codes[:n]
    body = [summary_html(data, ctx)]
    if check:
        body.append(check_html(check, codes, ctx))
    body.append(toc_html(shown, ctx))
    body.append('<section id="codes"><h2>Code objects in detail</h2>')
    for i, c in enumerate(shown):
        body += code_html(c, i, ctx)
    body.append("</section>")
    collector = [ctx.text(s) for s in ctx.rows(data.get("omitted"), "collector notes")[0]]
    head = header_html(data, ctx)   # after the body, so its cuts are counted too
    notes = collector + ctx.notes()
    top = ""
    if notes:
        top = (f'<p class="omitted">Parts of this report were left out ({len(notes)} note(s)): '
               f'<a href="#omitted">see the end</a>.</p>')
    start = ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
             f'<meta name="viewport" content="width=device-width, initial-scale=1">'
             f'<title>{esc(str(data.get("title") or "fastdyn report")[:300])}</title>'
             f'<style>{CSS}</style></head>\n<body>\n{head}<div id="toolbar"></div>{top}')
    end = f'{omitted_html(notes, "omitted")}\n<script>{JS}</script>\n</body></html>\n'
    return "\n".join([start] + body + [end])


def _minimal(data, max_bytes, size):
    title = esc(str(data.get("title") or "fastdyn report")[:200])
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>' + title +
            '</title></head><body><h1>' + title + '</h1><p class="omitted">Everything was left '
            f'out: even the most cut-down report took {size:,} bytes, over the bound of '
            f'{max_bytes:,} bytes.</p></body></html>\n')


def render(data, *, max_bytes=8_000_000):
    """The report page of a collected dict (see the module docstring) as HTML text whose
    UTF-8 encoding is at most max_bytes long."""
    data = data or {}
    size = 0
    levels = list(LEVELS)
    n = len(data.get("codes") or [])
    while n > 1:   # last resort: fewer code objects
        n //= 2
        levels.append(LEVELS[-1].replace(max_codes=n))
    levels.append(LEVELS[-1].replace(max_codes=0, text_chars=100, rows=5))
    svgs = {}
    for lim in levels:
        text = _page(data, Ctx(lim, svgs=svgs, lines=data.get("source_lines") or {}))
        if len(text) * 4 <= max_bytes:   # fits however it encodes (4 bytes a character at most)
            return text
        size = len(text.encode("utf-8"))
        if size <= max_bytes:
            return text
    text = _minimal(data, max_bytes, size)
    if len(text.encode("utf-8")) > max_bytes:
        raise ValueError(f"fastdyn.report_html: max_bytes={max_bytes} is too small for any page")
    return text


def write(data, path, **kw):
    """Render data and write it to path (UTF-8); returns path."""
    text = render(data, **kw)
    with open(path, "wb") as f:   # NB: encoded at once: a text file's writer took 3x as long
        f.write(text.encode("utf-8"))
    return path
