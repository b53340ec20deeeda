"""The public API of issue 2: fastdyn.jit in all its forms (functions, decorators with and without
arguments, nn.Module instances), fastdyn.explain's report, fastdyn.stats and fastdyn.reset, and
bad arguments."""
import os
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fdcheck import assert_same, call_with_stats, fastdyn, line_of

STATS_KEYS = {"frames_seen", "frames_compiled", "cache_hits", "cache_misses", "recompiles",
              "graph_breaks", "graphs", "compile_seconds", "sizes_compiled", "backend_failures", "background_compiles", "background_pending",
              "background_compile_seconds", "cuda_graph_captures", "cuda_graph_replays", "cuda_graph_skipped",
              "cuda_graph_recaptures", "cuda_graph_input_copies"}
if fastdyn is not None and fastdyn._C.has_llvm_cpu:
    STATS_KEYS |= {"kernel_compiles", "kernel_memory_hits", "kernel_disk_hits", "kernel_cache_rejected",
                   "kernel_memory_evictions"}


def three_ops(x):
    return torch.relu(x * 2 + 1)


def with_break(x):
    y = x + 1
    print("breaking")  # BREAK
    return y


# --------------------------------------------------------------------------- jit forms

def test_jit_call_form():
    x = torch.randn(3, 4)
    assert_same(fastdyn.jit(three_ops)(x), three_ops(x))
    assert fastdyn.stats()["graphs"] == 1


def test_jit_decorator_without_arguments():
    @fastdyn.jit
    def f(x):
        return x.sin() * 3

    x = torch.randn(5)
    assert_same(f(x), x.sin() * 3)
    assert fastdyn.stats()["frames_compiled"] == 1


def test_jit_decorator_with_arguments():
    @fastdyn.jit(backend="native", fullgraph=True)
    def f(x):
        return x.cos() - 1

    x = torch.randn(5)
    assert_same(f(x), x.cos() - 1)
    assert fastdyn.stats()["frames_compiled"] == 1


def test_jit_with_aten_backend():
    x = torch.randn(3, 4)
    assert_same(fastdyn.jit(three_ops, backend="aten")(x), three_ops(x))
    assert fastdyn.stats()["graphs"] == 1


@pytest.mark.parametrize("bad", ["no_such_backend", ""])
def test_unknown_backend_is_a_user_error_naming_it(bad):
    with pytest.raises((ValueError, TypeError)) as info:
        fastdyn.jit(three_ops, backend=bad)(torch.randn(2))
    if bad:
        assert bad in str(info.value), f"the error must name the backend: {info.value}"
    with pytest.raises((ValueError, TypeError)):
        fastdyn.enable(backend=bad)
    fastdyn.disable()


def test_jit_rejects_non_callables():
    with pytest.raises(TypeError):
        fastdyn.jit(42)


class ScaledLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(6, 4))
        self.bias = nn.Parameter(torch.randn(6))
        self.scale = 0.5

    def forward(self, x):
        return F.gelu(F.linear(x, self.weight, self.bias)) * self.scale


def test_jit_on_a_module_instance():
    m = ScaledLinear()
    jm = fastdyn.jit(m)
    x = torch.randn(3, 4)
    out = jm(x)
    assert_same(out, m(x))
    assert out.requires_grad, "parameters require grad: so must the output"
    assert fastdyn.stats()["graphs"] >= 1, f"the module's forward was not compiled: {fastdyn.stats()}"
    out.sum().backward()
    assert m.weight.grad is not None


def test_jit_module_sees_parameter_updates_and_attribute_changes():
    m = ScaledLinear()
    jm = fastdyn.jit(m)
    x = torch.randn(3, 4)
    jm(x)
    with torch.no_grad():
        m.weight.add_(1.0)  # an optimizer step: in place
    assert_same(jm(x), m(x), "after an in-place parameter update")
    m.scale = 3.0
    assert_same(jm(x), m(x), "after changing a Python attribute of the module")
    m.bias = nn.Parameter(torch.zeros(6))
    assert_same(jm(x), m(x), "after replacing a parameter")


def test_jit_on_a_module_built_from_torch_layers():
    m = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.LayerNorm(8), nn.Dropout(0.1)).eval()
    x = torch.randn(2, 4)
    assert_same(fastdyn.jit(m)(x), m(x))


# --------------------------------------------------------------------------- stats and reset

def test_stats_has_the_documented_keys():
    s = fastdyn.stats()
    assert set(s) == STATS_KEYS
    assert all(v == 0 for v in s.values()), f"reset() must zero every counter: {s}"


def test_stats_count_one_compile_and_one_hit():
    f = fastdyn.jit(three_ops)
    x = torch.randn(3, 4)
    f(x)
    f(x)
    s = fastdyn.stats()
    assert (s["frames_compiled"], s["cache_misses"], s["cache_hits"], s["graphs"]) == (1, 1, 1, 1), s
    assert (s["recompiles"], s["graph_breaks"]) == (0, 0), s
    assert s["frames_seen"] >= 2, s
    assert isinstance(s["compile_seconds"], float) and 0 < s["compile_seconds"] < 5, s


def test_stats_count_graph_breaks(capsys):
    fastdyn.jit(with_break)(torch.randn(3))
    s = fastdyn.stats()
    assert s["graph_breaks"] == 1 and s["graphs"] == 1, s  # x + 1 before the break


def test_reset_clears_caches_and_counters():
    f = fastdyn.jit(three_ops)
    x = torch.randn(3, 4)
    f(x)
    fastdyn.reset()
    assert all(v == 0 for v in fastdyn.stats().values()), fastdyn.stats()
    out, d = call_with_stats(f, x)
    assert d["cache_misses"] == 1 and d["frames_compiled"] == 1, f"reset() must drop the cache: {d}"
    assert_same(out, three_ops(x))


@pytest.mark.skipif(fastdyn is None or not fastdyn._C.has_llvm_cpu, reason="built without LLVM")
def test_stats_count_kernels_and_reset_keeps_them_compiled():
    def g(x):
        return (x * 3 - 2).sigmoid()
    x = torch.randn(7, 5)
    fastdyn.jit(g, backend="llvm_cpu")(x)
    first = fastdyn.stats()
    assert first["kernel_compiles"] + first["kernel_memory_hits"] + first["kernel_disk_hits"] == 1, first
    fastdyn.reset()  # forgets the graph, not the kernel: compiling it again finds it in memory
    fastdyn.jit(g, backend="llvm_cpu")(x)
    again = fastdyn.stats()
    assert (again["kernel_compiles"], again["kernel_memory_hits"], again["kernel_disk_hits"]) == (0, 1, 0), again


def test_reset_forgets_failed_captures(capsys):
    f = fastdyn.jit(with_break)
    f(torch.randn(3))
    fastdyn.reset()
    _, d = call_with_stats(f, torch.randn(3))
    assert d["graph_breaks"] == 1, f"after reset() the frame must be traced afresh: {d}"


def skipped_by_user(x):
    return x * 4


def test_reset_keeps_fastdyn_skip():
    skipped = fastdyn.skip(skipped_by_user)
    fastdyn.reset()
    out, d = call_with_stats(fastdyn.jit(skipped), torch.ones(2))
    assert_same(out, torch.full((2,), 4.0))
    assert d["frames_compiled"] == 0, f"fastdyn.skip must survive reset(): {d}"


# --------------------------------------------------------------------------- explain

def test_explain_reports_graph_ops_and_guards():
    x = torch.randn(3, 4)
    report = fastdyn.explain(three_ops, x)
    assert isinstance(report, fastdyn.ExplainOutput)
    assert report.graph_count == 1 and report.graph_break_count == 0
    assert list(report.break_reasons) == []
    assert len(report.op_counts) == 1
    ops = report.op_counts[0]
    assert sum(ops.values()) == 3, f"relu(x * 2 + 1) is three ATen ops: {ops}"
    for name in ("mul", "add", "relu"):
        assert any(name in op for op in ops), f"{name} missing from {ops}"
    assert report.guards and all(isinstance(g, str) for g in report.guards)
    assert any(re.search(r"float32|\bFloat\b", g) for g in report.guards), f"no dtype guard on x: {report.guards}"
    text = str(report)
    assert "relu" in text, text
    for guard in report.guards:
        assert guard in text, f"str(explain) misses the guard {guard!r}:\n{text}"


def test_explain_accepts_jitted_functions_and_modules():
    x = torch.randn(3, 4)
    assert fastdyn.explain(fastdyn.jit(three_ops), x).graph_count == 1
    m = ScaledLinear()
    for target in (m, fastdyn.jit(m)):
        report = fastdyn.explain(target, x)
        assert report.graph_count == 1, str(report)


def test_explain_counts_ops_per_graph():
    def two_matmuls(a, b, c):
        return (a @ b) @ c

    report = fastdyn.explain(two_matmuls, torch.randn(2, 3), torch.randn(3, 4), torch.randn(4, 5))
    assert report.graph_count == 1
    assert sum(report.op_counts[0].values()) == 2, report.op_counts


def test_explain_passes_keyword_arguments():
    def scaled(x, *, factor):
        return x * factor

    report = fastdyn.explain(scaled, torch.randn(3), factor=2.0)
    assert report.graph_count == 1, str(report)


def test_explain_reports_break_reason_and_line(capsys):
    report = fastdyn.explain(with_break, torch.randn(3))
    assert report.graph_count == 1 and report.graph_break_count == 1, str(report)
    (reason,) = report.break_reasons
    lineno = line_of(with_break, "# BREAK")
    assert reason.lineno == lineno and reason.reason
    assert os.path.samefile(reason.filename, __file__), reason.filename
    text = str(report)
    assert str(lineno) in text and reason.reason in text, text


def test_explain_does_not_change_the_function():
    x = torch.randn(3, 4)
    fastdyn.explain(three_ops, x)
    assert_same(three_ops(x), torch.relu(x * 2 + 1))
    fastdyn.reset()
    _, d = call_with_stats(three_ops, x)
    assert d["frames_seen"] == 0, f"explain left the hook on for a plain call: {d}"


def test_explain_shows_the_generated_code():
    def gelu_rows(x, w, b):
        return torch.nn.functional.gelu(x @ w + b).sum(-1)

    report = fastdyn.explain(gelu_rows, torch.randn(8, 16), torch.randn(16, 32), torch.randn(32))
    assert len(report.code) == report.graph_count == 1
    code = report.code[0]
    assert f"code of graph 0:" in str(report) and code.splitlines()[0] in str(report)
    if not fastdyn._C.has_llvm_cpu:
        assert code.startswith("backend aten"), code
        return
    # matmul stays an ATen call; bias, gelu and the row sum fuse into one kernel after it.
    assert code.startswith("backend llvm_cpu"), code
    kernels = [l for l in code.splitlines() if l.startswith("kernel ")]
    externs = [l for l in code.splitlines() if l.startswith("extern ")]
    assert len(kernels) == 1 and len(externs) == 1 and "aten::matmul" in externs[0], code
    assert "red0 = sum" in code and "Erf f32" in code, code  # gelu's erf: one op, each backend's own


def test_jit_module_runs_global_hooks_once():
    # The wrapper fastdyn.jit(module) returns is an nn.Module too; called through nn.Module's
    # __call__ it would run a global forward hook for itself as well as for the module.
    m = torch.nn.Sequential(torch.nn.Linear(3, 3))
    with torch.no_grad():
        m[0].weight.zero_()
        m[0].bias.zero_()
    g, x = fastdyn.jit(m), torch.ones(1, 3)
    g(x)
    handle = torch.nn.modules.module.register_module_forward_hook(lambda mod, i, o: o + 100)
    try:
        assert torch.equal(g(x), m(x))  # 200: once for the Linear, once for the Sequential
    finally:
        handle.remove()


def doubled_sin(x):
    return (x * 2).sin() + 1


def tripled_cos(x):
    return (x * 3).cos() - 1


@pytest.mark.skipif(fastdyn is None or not fastdyn._C.has_llvm_cpu, reason="built without LLVM")
def test_backend_is_per_jit_wrapper_and_each_entry_keeps_its_own():
    # The backend was one process-wide setting: the last jit(..., backend=) chose it for every
    # function. Now each wrapper's calls compile with its own, and an entry serves only calls
    # that ask for the backend it was compiled with.
    fastdyn.set_background_compile(False)
    try:
        x = torch.randn(16)
        on_aten = fastdyn.jit(doubled_sin, backend="aten")
        native = fastdyn.jit(tripled_cos)
        for _ in range(2):
            assert_same(native(x), tripled_cos(x))
            assert_same(on_aten(x), doubled_sin(x))
        assert fastdyn._C.code_text(tripled_cos).startswith("backend llvm_cpu"), fastdyn._C.code_text(tripled_cos)
        assert fastdyn._C.code_text(doubled_sin).startswith("backend aten"), fastdyn._C.code_text(doubled_sin)
        # One function under two wrappers: two entries, each hit by its own wrapper.
        native_too = fastdyn.jit(doubled_sin)
        assert_same(native_too(x), doubled_sin(x))
        assert fastdyn._C.cache_size(doubled_sin) == 2
        assert fastdyn._C.code_text(doubled_sin).startswith("backend llvm_cpu")
        before = fastdyn.stats()
        on_aten(x), native_too(x)
        after = fastdyn.stats()
        assert after["cache_hits"] - before["cache_hits"] == 2 and after["frames_compiled"] == before["frames_compiled"]
        # enable()'s backend is the process default; a wrapper's own wins inside its calls.
        fastdyn.reset()
        fastdyn.enable(backend="aten")
        try:
            tripled_cos(x)
            native(x)
        finally:
            fastdyn.disable()
        assert fastdyn._C.cache_size(tripled_cos) == 2
    finally:
        fastdyn.set_background_compile(True)


def test_unbuilt_backend_runs_on_aten():
    if fastdyn._C.has_llvm_cpu:
        pytest.skip("this build has llvm_cpu")
    x = torch.randn(16)
    assert_same(fastdyn.jit(doubled_sin, backend="llvm_cpu")(x), doubled_sin(x))
    assert fastdyn._C.code_text(doubled_sin).startswith("backend aten")


def test_jit_keeps_the_wrapped_signature_and_metadata():
    # transformers' generate() reads inspect.signature(model.forward): a jit-wrapped forward must
    # answer it like the function it wraps.
    import inspect

    class M(torch.nn.Module):
        def forward(self, input_ids, past_key_values=None, **kwargs):
            """doc"""
            return input_ids * 2

    m = M()
    f = fastdyn.jit(m.forward)
    assert list(inspect.signature(f).parameters) == ["input_ids", "past_key_values", "kwargs"]
    assert f.__wrapped__ == m.forward
    assert f.__name__ == "forward" and f.__doc__ == "doc"
    x = torch.arange(3)
    torch.testing.assert_close(f(x), x * 2)


def test_a_view_of_a_parameter_under_no_grad_keeps_the_graph_native():
    # ViT's class token: `self.cls_token.expand(B, -1, -1)` under torch.no_grad. The view's
    # flag is set (eager: views made outside grad mode keep it), and lowering took it for a
    # backward to record: every timm ViT ran on ATen ("autograd: ... requires grad").
    class ClassToken(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cls = torch.nn.Parameter(torch.randn(1, 1, 8))
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            c = self.cls.expand(x.shape[0], -1, -1)
            return self.lin(torch.cat([c, x], dim=1)).relu(), c

    m = ClassToken().eval()
    x = torch.randn(2, 3, 8)
    with torch.no_grad():
        report = fastdyn.explain(m, x)
        out, c = fastdyn.jit(m)(x)
        assert not out.requires_grad and c.requires_grad  # eager: a view made under no_grad keeps the flag
    code = report.code[0]
    assert "runs on aten" not in code and "requires grad" not in code, code
    if fastdyn._C.has_llvm_cpu:
        assert code.startswith("backend llvm_cpu") and "kernel " in code, code
    # In grad mode the view does require grad, as eager's.
    out, c = fastdyn.jit(m)(x)
    assert c.requires_grad and out.requires_grad
