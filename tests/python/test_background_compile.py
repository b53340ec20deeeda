"""Tiered compilation (runtime/tiered_executable.h): a new graph runs on ATen while its llvm_cpu
kernels compile on a background thread, then the kernels take over.

Checked here: the first calls give exactly eager's results (they are ATen's calls), the kernels
take over after fastdyn.synchronize(), in-place graphs mutate correctly on both tiers, calls from
several threads across the switch, stats, and the process events that meet a compile in flight:
fork, and exit. The rest of the suite compiles synchronously (conftest.py), so that its first
calls test the kernels."""
import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch
import torch.nn.functional as F

from fdcheck import fastdyn

pytestmark = pytest.mark.skipif(fastdyn is None or not fastdyn._C.has_llvm_cpu,
                                reason="needs fastdyn with the llvm_cpu backend")

PENDING = "backend llvm_cpu (kernels compiling in the background"


@pytest.fixture
def background():
    fastdyn.set_background_compile(True)
    fastdyn._C.hold_background_for_testing(True)
    try:
        yield
    finally:
        fastdyn._C.hold_background_for_testing(False)
        fastdyn.synchronize()


def layer(x, w, b):
    # A reduction (layer norm) whose kernel sums in another order than ATen: the tiers differ in
    # the last bits, so exact equality proves which tier ran.
    return F.gelu(F.layer_norm(x, (x.shape[-1],), w, b)) * 2 + 1


def inputs():
    torch.manual_seed(1)
    return torch.randn(64, 1000), torch.randn(1000), torch.randn(1000)


def test_first_calls_run_aten_then_kernels_take_over(background):
    args = inputs()
    want = layer(*args)
    f = fastdyn.jit(layer)
    first = f(*args)
    assert torch.equal(first, want)  # ATen ran it: eager's bits
    assert fastdyn._C.code_text(layer).startswith(PENDING)
    assert fastdyn.stats()["background_pending"] == 1
    assert torch.equal(f(*args), want)  # still ATen while the kernels wait
    fastdyn._C.hold_background_for_testing(False)
    fastdyn.synchronize()
    code = fastdyn._C.code_text(layer)
    assert code.startswith("backend llvm_cpu\n") and "kernel" in code, code
    s = fastdyn.stats()
    assert s["background_compiles"] == 1 and s["background_pending"] == 0, s
    assert s["background_compile_seconds"] > 0
    got = f(*args)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert s["frames_compiled"] == 1 and fastdyn.stats()["recompiles"] == 0


def test_a_small_graph_leaves_its_graph_passes_to_the_background_too(background):
    # Too small for a warm start to pay (codegen::warm_start_may_pay): nothing the calling thread
    # could run compiled at once depends on the graph passes, so they run on the worker with the
    # kernels, and the call that traced the graph pays its trace alone. explain() still shows
    # the program it compiled.
    def small(x):
        return (x * 2 + 1).relu() - 0.5

    x = torch.randn(16, 16)
    f = fastdyn.jit(small)
    assert torch.equal(f(x), small(x))
    code = fastdyn._C.code_text(small)
    assert code.startswith(PENDING) and "after the graph passes" in code, code
    assert "kernel k0" not in code, "the passes ran on the calling thread: " + code
    fastdyn._C.hold_background_for_testing(False)
    fastdyn.synchronize()
    assert fastdyn._C.code_text(small).startswith("backend llvm_cpu\n")
    fastdyn._C.hold_background_for_testing(True)
    report = fastdyn.explain(small, x)
    assert report.code and "kernel k0" in report.code[0], report.code


def test_synchronous_mode_compiles_the_kernels_before_the_first_call():
    fastdyn.set_background_compile(False)
    args = inputs()
    fastdyn.jit(layer)(*args)
    assert fastdyn._C.code_text(layer).startswith("backend llvm_cpu\n")
    assert fastdyn.stats()["background_pending"] == 0


def test_in_place_graph_mutates_the_same_on_both_tiers(background):
    def step(x, y):
        x.mul_(2).add_(y)
        return x.sum()

    f = fastdyn.jit(step)
    for i in range(4):
        if i == 2:
            fastdyn._C.hold_background_for_testing(False)
            fastdyn.synchronize()
            assert fastdyn._C.code_text(step).startswith("backend llvm_cpu\n")
        x, y = torch.randn(257), torch.randn(257)
        xe, xf = x.clone(), x.clone()
        want = step(xe, y)
        v = xf._version
        got = f(xf, y)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(xf, xe, rtol=0, atol=0)
        assert xf._version == v + 2


def test_calls_from_threads_across_the_switch_agree_with_eager():
    fastdyn.set_background_compile(True)
    args = inputs()
    want = layer(*args)
    f = fastdyn.jit(layer)
    f(*args)  # compiles; the kernels build while the threads call
    errors = []

    def worker():
        try:
            for _ in range(30):
                torch.testing.assert_close(f(*args), want, rtol=1e-5, atol=1e-5)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    fastdyn.synchronize()
    assert not errors, errors
    assert fastdyn._C.code_text(layer).startswith("backend llvm_cpu\n")


def test_a_model_over_many_calls_matches_eager_on_both_tiers():
    fastdyn.set_background_compile(True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.LayerNorm(256),
                                torch.nn.Linear(256, 64), torch.nn.Softmax(-1)).eval()
    x = torch.randn(8, 64)
    with torch.no_grad():
        want = model(x)
        jm = fastdyn.jit(model)
        for _ in range(50):
            torch.testing.assert_close(jm(x), want, rtol=1e-5, atol=1e-6)
        fastdyn.synchronize()
        torch.testing.assert_close(jm(x), want, rtol=1e-5, atol=1e-6)
    assert fastdyn.stats()["recompiles"] == 0


def run_script(body, **extra_env):
    env = dict(os.environ, FASTDYN_CACHE_DIR="off")  # a real (slow) compile is in flight
    env.pop("FASTDYN_BACKGROUND_COMPILE", None)
    env.update(extra_env)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(body)], env=env, capture_output=True, text=True,
                       timeout=120)
    return r


def test_exit_while_kernels_compile_is_clean():
    r = run_script("""
        import torch, fastdyn
        import torch.nn.functional as F
        f = fastdyn.jit(lambda x: F.softmax(F.layer_norm(x, (x.shape[-1],)), -1).exp().sum(0))
        f(torch.randn(32, 300))
        print("pending", fastdyn.stats()["background_pending"])
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("pending"), r.stdout
    assert "terminate" not in r.stderr and "Fatal" not in r.stderr, r.stderr


def test_fork_while_kernels_compile():
    # The fork waits for the compile in flight; parent and child both use the kernels after.
    r = run_script("""
        import os, torch, fastdyn
        x = torch.randn(16, 500)
        f = fastdyn.jit(lambda x: (x * 3).tanh().softmax(-1))
        want = (x * 3).tanh().softmax(-1)
        f(x)
        pid = os.fork()
        fastdyn.synchronize()
        code = fastdyn._C.code_text(f)
        ok = code.startswith("backend llvm_cpu\\n") and torch.allclose(f(x), want, atol=1e-6)
        g = fastdyn.jit(lambda x: (x - 1).sigmoid().sum(-1))   # a new compile after the fork
        g(x)
        fastdyn.synchronize()
        ok = ok and torch.allclose(g(x), (x - 1).sigmoid().sum(-1), atol=1e-5)
        ok = ok and fastdyn._C.code_text(g).startswith("backend llvm_cpu\\n")
        if pid == 0:
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print("child", os.WEXITSTATUS(status), "parent", int(not ok))
    """)
    assert r.returncode == 0, r.stderr
    assert "child 0 parent 0" in r.stdout, r.stdout + r.stderr


def test_environment_variable_turns_it_off():
    r = run_script("""
        import torch, fastdyn
        assert not fastdyn._C.background_compile()
        f = fastdyn.jit(lambda x: x.exp() + 1)
        f(torch.randn(10))
        print(fastdyn._C.code_text(f).splitlines()[0])
    """, FASTDYN_BACKGROUND_COMPILE="0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "backend llvm_cpu", r.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_compile_thread_runs_below_the_user_threads(background):
    # On a small machine the first calls (ATen, all cores busy in OpenMP) must not share their
    # cores evenly with LLVM: the worker runs at nice 10, named for top -H.
    f = fastdyn.jit(layer)
    args = (torch.randn(8, 32), torch.randn(32), torch.randn(32))
    f(*args)
    fastdyn._C.hold_background_for_testing(False)
    fastdyn.synchronize()
    workers = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as fh:
                name = fh.read().strip()
            with open(f"/proc/self/task/{tid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if name == "fastdyn-compile":
            workers.append(int(fields[16]))  # field 19 of stat: nice
    assert workers == [10], f"compile threads and their nice values: {workers}"
    assert os.nice(0) == 0, "the calling thread keeps its priority"


def test_a_dynamic_entrys_first_size_emits_its_kernels_on_the_background_thread(background):
    # Kernels this process never emitted cannot be built yet: the reuse probe of a dynamic entry's
    # first size answers so without emitting them on the calling thread (codegen/llvm/backend.cpp
    # kernel_fn, Missing::Skip); the background compile emits them.
    def scaled_norm(x):
        return F.softmax(x * 3.25, dim=-1) + x.sum(-1, keepdim=True) * 0.125

    x = torch.randn(6, 37)
    f = fastdyn.jit(scaled_norm, dynamic=True)
    emitted = fastdyn._C.kernels_emitted()
    assert torch.equal(f(x), scaled_norm(x))  # ATen ran it
    assert fastdyn._C.kernels_emitted() == emitted
    fastdyn._C.hold_background_for_testing(False)
    fastdyn.synchronize()
    assert fastdyn._C.kernels_emitted() > emitted
    torch.testing.assert_close(f(x), scaled_norm(x))
    y = torch.randn(9, 53)
    torch.testing.assert_close(f(y), scaled_norm(y))
