"""Accuracy mode (FASTDYN_CHECK=1, fastdyn._C.set_check; runtime/accuracy_check.h): every kernel of
a compiled graph is compared with the graph run op by op on ATen in float64. Correct kernels in
float32, float16, bfloat16 and integer graphs are never flagged; a deliberately wrong kernel
(injected through the test hook) is the one reported, with the inputs that reproduce the call, and
the call still returns what the kernels computed."""
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from fdcheck import fastdyn

C = fastdyn._C if fastdyn is not None else None
# Kernels to check: llvm_cpu's on CPU, else (the accelerator machine builds without LLVM) cuda's.
DEV = "cpu" if C is not None and C.has_llvm_cpu else ("cuda" if torch.cuda.is_available() else None)
pytestmark = pytest.mark.skipif(DEV is None, reason="no compiling backend: built without LLVM and no GPU")


@pytest.fixture(autouse=True)
def check_mode():
    # The plans are built at compile time: the mode is on before the first call of each graph.
    C.set_check(True)
    C.check_clear()
    yield
    C._set_corrupt_kernel_for_testing(None)
    C.set_check(False)
    C.check_clear()


def stored_values(code, kernel):
    """The graph values kernel `kernel` stores, from explain's program text."""
    block = re.search(rf"^kernel {kernel} .*?(?=^kernel |^return |\Z)", code, re.S | re.M).group(0)
    return [int(v) for v in re.findall(r"store v(\d+)\[", block)]


def softmax_chain(x, w, b):
    y = torch.softmax(x @ w + b, -1).sum(0)
    return (y * 2 + 1).tanh() - y


def softmax_inputs(dtype=torch.float32):
    return (torch.randn(16, 32, dtype=dtype, device=DEV), torch.randn(32, 8, dtype=dtype, device=DEV),
            torch.randn(8, dtype=dtype, device=DEV))


def test_correct_kernels_are_checked_and_not_flagged():
    args = softmax_inputs()
    got = fastdyn.jit(softmax_chain)(*args)
    torch.testing.assert_close(got, softmax_chain(*args))
    assert C.checked_graphs() > 0
    assert C.check_divergences() == []


def test_a_wrong_kernel_is_reported_with_its_inputs_and_its_result_is_returned():
    code = fastdyn.explain(softmax_chain, *softmax_inputs()).code[0]
    assert "kernel k0" in code and "kernel k1" in code, code
    f = fastdyn.jit(softmax_chain)
    args = softmax_inputs()
    right = f(*args).clone()
    C._set_corrupt_kernel_for_testing("k1")
    wrong = f(*args)
    C._set_corrupt_kernel_for_testing(None)

    [d] = C.check_divergences()
    assert d["kernel"] == "k1"
    assert d["value"] in stored_values(code, "k1")
    assert d["label"].endswith("softmax_chain")
    assert d["dtype"] == "float32"
    assert d["max_abs_err"] > d["atol"] and d["max_rel_err"] > d["rtol"]
    assert d["detail"].startswith("at [0]: got "), d["detail"]
    assert len(d["inputs"]) == 3 and all(torch.equal(a, b) for a, b in zip(d["inputs"], args))
    # The mode observes: the call returns what the wrong kernel computed (k1 writes the result).
    expected = right.clone()
    expected[0] += 1
    assert torch.equal(wrong, expected)


def test_the_first_wrong_kernel_is_the_one_reported_not_those_that_read_it():
    f = fastdyn.jit(softmax_chain)
    f(*softmax_inputs())
    C._set_corrupt_kernel_for_testing("k0")  # k1 reads k0's softmax: its result is wrong too
    f(*softmax_inputs())
    assert [d["kernel"] for d in C.check_divergences()] == ["k0"]


def layer_norm_gelu(x, w, b):
    return F.gelu(F.layer_norm(x, x.shape[-1:], w, b)) * torch.sigmoid(x)


def long_reductions(x):
    return torch.softmax(x, -1) * x.sum(-1, keepdim=True) + x.mean(0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_reduced_precision_and_long_reductions_are_not_flagged(dtype):
    x = torch.randn(64, 1024, dtype=dtype, device=DEV) * 4
    w, b = torch.randn(1024, dtype=dtype, device=DEV), torch.randn(1024, dtype=dtype, device=DEV)
    fastdyn.jit(layer_norm_gelu)(x, w, b)
    fastdyn.jit(long_reductions)(x)
    fastdyn.jit(softmax_chain)(*softmax_inputs(dtype))
    assert C.checked_graphs() >= 3
    assert C.check_divergences() == []


def integer_chain(x, y):
    z = (x * 3 + y) % 7
    return z.sum(0), z > 2


def test_integers_are_compared_exactly():
    x, y = torch.randint(-50, 50, (8, 16), device=DEV), torch.randint(-50, 50, (8, 16), device=DEV)
    f = fastdyn.jit(integer_chain)
    s, m = f(x, y)
    assert torch.equal(s, integer_chain(x, y)[0]) and C.check_divergences() == []
    code = fastdyn.explain(integer_chain, x, y).code[0]
    C._set_corrupt_kernel_for_testing("k0")
    f(x, y)
    [d] = C.check_divergences()
    assert d["kernel"] == "k0" and d["value"] in stored_values(code, "k0")
    assert d["atol"] == 0 and d["rtol"] == 0 and d["max_abs_err"] == 1


def test_graphs_compiled_with_the_mode_off_are_not_checked():
    C.set_check(False)
    f = fastdyn.jit(softmax_chain)
    f(*softmax_inputs())
    C.set_check(True)
    C._set_corrupt_kernel_for_testing("k1")
    f(*softmax_inputs())
    assert C.checked_graphs() == 0 and C.check_divergences() == []


@pytest.mark.skipif(fastdyn is None or not hasattr(fastdyn._C, "journal_on"), reason="no report journal")
def test_a_divergence_is_a_check_event_of_its_graph_in_the_report_journal():
    C.journal_clear()
    C.journal_on(True)
    try:
        f = fastdyn.jit(softmax_chain)
        C._set_corrupt_kernel_for_testing("k1")
        f(*softmax_inputs())
        events, _ = C.journal_events()
    finally:
        C.journal_on(False)
        C.journal_clear()
    [d] = C.check_divergences()
    checks = [(graph, fields) for graph, kind, fields, _ in events if kind == "check"]
    assert len(checks) == 1
    graph, fields = checks[0]
    assert fields["kernel"] == "k1" and fields["inputs_id"] == str(d["id"]) and fields["value"] == str(d["value"])
    assert graph >= 0 and graph == d["graph"]
    assert graph in [g for g, kind, _, _ in events if kind == "entry"]


@pytest.mark.parametrize("value,on", [("1", True), ("yes", True), ("off", False), ("maybe", False)])
def test_fastdyn_check_in_the_environment_turns_the_mode_on(value, on):
    env = dict(os.environ, FASTDYN_CHECK=value)
    r = subprocess.run([sys.executable, "-c", "import fastdyn; print(fastdyn._C.check_enabled())"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == str(on), r.stderr
    assert ("FASTDYN_CHECK=maybe is none of" in r.stderr) == (value == "maybe"), r.stderr
