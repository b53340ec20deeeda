"""The HTML report end to end (issue 23): what the journal records while a report is asked for,
as the rendered page shows it. Each report is parsed (html.parser) and its elements checked:
break sites with reasons, one graph picture per graph, guards, recompiles with the guard that
failed (old value against new), kernels with their loop IR, generated code and source lines,
timings; and that nothing is recorded while no report is asked for.
(report_html's own rendering rules are tested in test_report_html.py on synthetic data.)
"""
import html.parser
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from fdcheck import fastdyn

# Kernels exist where a compiling backend runs the graph: llvm_cpu on CPU (the accelerator machine
# builds without LLVM: its CPU graphs run on aten), cuda on a GPU.
HAS_LLVM = fastdyn is not None and fastdyn._C.has_llvm_cpu
needs_llvm = pytest.mark.skipif(not HAS_LLVM, reason="built without LLVM: CPU graphs have no kernels")
DEVICES = [pytest.param("cpu", marks=needs_llvm),
           pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"))]


class Page(html.parser.HTMLParser):
    """Every start tag as (tag, attrs), and the text inside each element with a class or id."""

    def __init__(self, text):
        super().__init__()
        self.tags = []
        self._open = []  # (tag, attrs, text parts)
        self.texts = []  # (tag, attrs, text) of closed elements
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag not in ("br", "img", "meta", "input", "link", "hr", "path", "line", "circle", "rect", "polygon",
                       "polyline", "stop", "use"):
            self._open.append((tag, a, []))

    def handle_endtag(self, tag):
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i][0] == tag:
                t, a, parts = self._open.pop(i)
                text = "".join(parts)
                self.texts.append((t, a, text))
                if self._open:
                    self._open[-1][2].append(text)
                return

    def handle_data(self, data):
        if self._open:
            self._open[-1][2].append(data)

    def with_class(self, cls, tag=None):
        return [(t, a) for t, a in self.tags if cls in (a.get("class") or "").split() and (tag is None or t == tag)]

    def text_of(self, cls, tag=None):
        return [text for t, a, text in self.texts if cls in (a.get("class") or "").split() and (tag is None or t == tag)]


def _report(tmp_path, name="report.html"):
    path = str(tmp_path / name)
    assert fastdyn.report(path) == path
    with open(path, encoding="utf-8") as f:
        return Page(f.read()), path


@pytest.fixture
def recording():
    fastdyn.set_background_compile(False)
    fastdyn.start_report()
    yield
    fastdyn.stop_report()
    fastdyn._C.journal_clear()
    fastdyn.set_background_compile(True)


def breaks_and_recompiles(x, w):
    y = torch.relu(x @ w) + 1
    print("between the graphs")
    return (y.softmax(-1) * 2).sum(0)


BREAK_LINE = breaks_and_recompiles.__code__.co_firstlineno + 2  # the print


def test_a_function_with_a_break_and_recompiles(tmp_path, recording, capsys):
    f = fastdyn.jit(breaks_and_recompiles)
    w = torch.randn(16, 32)
    for rows in (8, 9):
        x = torch.randn(rows, 16)
        torch.testing.assert_close(f(x, w), breaks_and_recompiles(x, w))
    f(torch.randn(9, 16).double(), w.double())
    page, _ = _report(tmp_path)

    # The break site: marked on the print's line, with the reason.
    marks = page.with_class("break")
    assert any(a.get("data-line") == str(BREAK_LINE) for _, a in marks), marks
    assert any("print" in t for t in page.text_of("break")) or \
        any("print" in (a.get("title") or "") for _, a in marks)
    # One picture per graph: both halves of the function, each entry of each.
    svgs = page.with_class("graph", "svg")
    assert len(svgs) >= 4, svgs
    ops = page.with_class("op", "g")
    assert {a.get("data-value") for _, a in ops} >= {"2", "3", "4"}  # matmul, relu, add
    # Guards, and the recompiles with the guard that failed: old size against new, then dtype.
    guards = page.text_of("guard", "li")
    assert any("L['x']" in g and "size=[8, 16]" in g for g in guards), guards[:5]
    recompiles = "\n".join(page.text_of("recompile", "tr"))
    assert "[9, 16] != [8, 16]" in recompiles, recompiles
    assert "Double != Float" in recompiles, recompiles
    assert "mark_dynamic" in recompiles and "Cast before the call" in recompiles, recompiles
    # Timings of the passes.
    timings = "\n".join(page.text_of("timings", "table"))
    assert "trace" in timings, timings
    assert page.with_class("stats", "table")
    if not HAS_LLVM:
        return
    # Kernels: drawn as groups; loop IR, the generated LLVM IR, the source line their ops came from.
    assert page.with_class("kernel", "g"), "fused kernels are drawn as groups"
    assert "plan_memory" in timings
    ir = page.text_of("kernel-ir", "pre")
    assert any("stage 0" in t for t in ir)
    generated = page.text_of("kernel-generated", "pre")
    assert any("define" in t and "fastdyn_kernel" in t for t in generated), generated[:1]
    blocks = [a for t, a in page.tags if t == "details" and "kernel-code" in (a.get("class") or "")]
    assert blocks and all(a.get("id") for a in blocks)
    relu_line = breaks_and_recompiles.__code__.co_firstlineno + 1
    assert f":{relu_line}" in "\n".join(page.text_of("kernel-code", "details"))


@needs_llvm
def test_a_kernel_met_before_still_shows_its_code():
    # The report records an llvm_cpu kernel as its bitcode, also when the emitter's memo or the
    # kernel cache serves it (no new emission), and prints the IR when the report is read.
    def twice(x):
        return (x * 3.0 + 1.0).tanh()
    fastdyn.jit(twice)(torch.randn(32, 64))  # compiled before the report: the memo knows its plan
    fastdyn.synchronize()
    emitted = fastdyn._C.kernels_emitted()
    fastdyn.reset()
    fastdyn.start_report()
    try:
        fastdyn.jit(twice)(torch.randn(32, 64))
        fastdyn.synchronize()
        events, _ = fastdyn._C.journal_events()
    finally:
        fastdyn.stop_report()
    assert fastdyn._C.kernels_emitted() == emitted  # served without emitting again
    code = [f["code"] for _, kind, f, _ in events if kind == "kernel_code"]
    assert code and all("define" in c and "fastdyn_kernel" in c for c in code), code[:1]
    assert not any("bitcode" in f for _, kind, f, _ in events if kind == "kernel_code")


def test_nothing_is_recorded_while_no_report_is_asked_for():
    assert not fastdyn._C.journal_is_on()
    fastdyn._C.journal_clear()
    f = fastdyn.jit(breaks_and_recompiles)
    f(torch.randn(4, 16), torch.randn(16, 8))
    fastdyn.synchronize()
    events, dropped = fastdyn._C.journal_events()
    assert events == [] and dropped == 0


@needs_llvm
def test_the_gpt2_model(tmp_path, recording):
    hf_zoo = pytest.importorskip("hf_zoo")
    pytest.importorskip("transformers")
    model, inputs = hf_zoo.build("gpt2")
    with torch.no_grad():
        expected = model(**inputs).logits
        fastdyn.enable()
        try:
            got = model(**inputs).logits
        finally:
            fastdyn.disable()
    torch.testing.assert_close(got, expected)
    page, path = _report(tmp_path)
    assert os.path.getsize(path) < 8_000_000
    svgs = page.with_class("graph", "svg")
    assert svgs
    # The attention and MLP ops came from transformers' modeling file, and kernels say so.
    locations = "\n".join(page.text_of("kernel-code", "details"))
    assert "modeling_gpt2.py:" in locations
    # ... with the text of those library lines (the source shown is transformers' wrapper's).
    assert any("self." in t or "=" in t for t in page.text_of("srcline", "code")), page.text_of("srcline")[:3]
    assert page.text_of("kernel-generated", "pre")
    # Nothing points outside the file.
    for tag, a in page.tags:
        for attr in ("src", "href"):
            assert not (a.get(attr) or "").startswith(("http:", "https:", "//")), (tag, a)


def test_report_from_the_environment_and_the_launcher(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import torch
        def f(x):
            y = x.sin() * 2
            print("break")
            return y.cos()
        for n in (4, 5, 6):
            f(torch.randn(n))
    """))
    out1 = tmp_path / "env.html"
    env = dict(os.environ, FASTDYN_REPORT=str(out1))
    r = subprocess.run([sys.executable, "-m", "fastdyn", "run", str(script)], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out2 = tmp_path / "flag.html"
    env.pop("FASTDYN_REPORT")
    r2 = subprocess.run([sys.executable, "-m", "fastdyn", "run", "--report", str(out2), str(script)], env=env,
                        capture_output=True, text=True, timeout=300)
    assert r2.returncode == 0, r2.stderr
    for out in (out1, out2):
        page = Page(out.read_text(encoding="utf-8"))
        assert any(a.get("data-line") == "5" for _, a in page.with_class("break")), out
        assert page.with_class("graph", "svg")
        assert "break\n" * 3 in (r.stdout if out is out1 else r2.stdout)


def two_kernels(x, w):
    y = torch.relu(x @ w) + 1        # k0 after the matmul
    return (y.softmax(-1) * 2).sum(0)  # k1, k2


@pytest.mark.parametrize("device", DEVICES)
def test_accuracy_mode_names_the_wrong_kernel(tmp_path, device):
    fastdyn.set_background_compile(False)
    fastdyn.start_report(check=True)
    try:
        fastdyn._C._set_corrupt_kernel_for_testing("k1")
        x, w = torch.randn(8, 16, device=device), torch.randn(16, 32, device=device)
        fastdyn.jit(two_kernels)(x, w)
        fastdyn.synchronize()
        page, path = _report(tmp_path)
    finally:
        fastdyn._C._set_corrupt_kernel_for_testing(None)
        fastdyn.start_report(check=False)
        fastdyn.stop_report()
        fastdyn.set_background_compile(True)
    rows = page.with_class("divergence", "tr")
    assert [a.get("data-kernel") for _, a in rows] == ["k1"], rows
    assert any(t == "details" and "diverged" in (a.get("class") or "") and a.get("id", "").endswith("-k1")
               for t, a in page.tags)
    saved = torch.load(os.path.splitext(path)[0] + ".inputs0.pt", map_location=device)
    assert torch.equal(saved[0], x) and torch.equal(saved[1], w)


def test_the_recompile_limit_warning_is_in_the_report(tmp_path, recording):
    fastdyn.set_recompile_limit(2)
    try:
        f = fastdyn.jit(lambda x: x.sin() + 1, dynamic=False)
        with pytest.warns(UserWarning, match="recompile limit"):
            for n in (2, 3, 4, 5):
                f(torch.randn(n))
    finally:
        fastdyn.set_recompile_limit(8)
    page, _ = _report(tmp_path)
    limit = "\n".join(page.text_of("limit"))
    assert "reached the recompile limit" in limit and "size [4] != [3]" in limit, limit


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (scripts/device_test.sh runs it)")
def test_cuda_kernels_show_their_cuda_source(tmp_path, recording):
    x = torch.randn(64, 256, device="cuda")
    f = fastdyn.jit(lambda x: (x * 2).softmax(-1) + 1)
    torch.testing.assert_close(f(x), (x * 2).softmax(-1) + 1)
    fastdyn.synchronize()
    page, _ = _report(tmp_path)
    generated = page.text_of("kernel-generated", "pre")
    assert any("__global__" in t for t in generated), generated[:1]


def test_the_source_block_is_what_inspect_finds():
    """The report shows each code object's source block, found by a scan of brackets, strings and
    indentation (_report._block) rather than tokenize: the same lines as inspect.getblock for every
    function of a few modules (decorators, docstrings, multi-line signatures, trailing comments)."""
    import importlib
    import inspect
    import linecache
    import types
    from fastdyn import _report
    n = 0
    for name in ["torch.nn.modules.module", "torch.nn.functional", "inspect", "dataclasses", "threading"]:
        module = importlib.import_module(name)
        fns = [o for o in vars(module).values() if isinstance(o, types.FunctionType)]
        fns += [v for o in vars(module).values() if isinstance(o, type) for v in vars(o).values()
                if isinstance(v, types.FunctionType)]
        for f in fns:
            lines = linecache.getlines(f.__code__.co_filename)
            start = f.__code__.co_firstlineno - 1
            if not lines:
                continue
            want = [line.rstrip() for line in inspect.getblock(lines[start:])]
            assert [line.rstrip() for line in _report._block(lines, start)] == want, f.__qualname__
            n += 1
    assert n > 500
