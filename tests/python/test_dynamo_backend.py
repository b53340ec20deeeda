"""torch.compile(model, backend="fastdyn") (python/fastdyn/dynamo_backend.py): Dynamo captures,
fastdyn compiles each FX GraphModule with its own code generators; fastdyn's own hook stays on."""
from importlib.metadata import entry_points

import pytest
import torch
import torch.nn as nn

from fdcheck import fastdyn

pytestmark = pytest.mark.skipif(fastdyn is None, reason="needs fastdyn")


def registered():
    return any(e.name == "fastdyn" for e in entry_points(group="torch_dynamo_backends"))


@pytest.fixture(autouse=True)
def fresh():
    import torch._dynamo
    torch._dynamo.reset()
    fastdyn.reset()
    fastdyn.set_background_compile(False)
    yield
    fastdyn.set_background_compile(True)
    fastdyn.disable()
    torch._dynamo.reset()


def backend():
    # The name where the package's entry point is installed (pip install -e .), else the function.
    from fastdyn.dynamo_backend import fastdyn_backend
    return "fastdyn" if registered() else fastdyn_backend


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 8)).eval()


def test_the_name_is_registered_for_torch_compile():
    if not registered():
        pytest.skip("the package's metadata is not installed (PYTHONPATH only)")
    from torch._dynamo.backends.registry import lookup_backend
    from fastdyn.dynamo_backend import fastdyn_backend
    assert lookup_backend("fastdyn") is fastdyn_backend


def test_each_dynamo_graph_is_one_fastdyn_graph_with_eagers_results():
    m = mlp()
    x = torch.randn(32, 16)
    c = torch.compile(m, backend=backend())
    with torch.no_grad():
        want = m(x)
        for _ in range(3):
            torch.testing.assert_close(c(x), want)
    s = fastdyn.stats()
    assert s["graphs"] == 1 and s["graph_breaks"] == 0 and s["frames_compiled"] == 1, s
    assert s["backend_failures"] == 0, s
    if fastdyn._C.has_llvm_cpu:
        # fastdyn's kernels ran, not ATen op by op: compiled, or found in a cache.
        assert s["kernel_compiles"] + s["kernel_memory_hits"] + s["kernel_disk_hits"] > 0, s


def test_a_dynamo_graph_break_gives_two_fastdyn_graphs():
    def f(x):
        y = (x * 2).sin()
        n = int(y.sum() > 0)  # a data-dependent Python value: Dynamo breaks here
        return (y + n).relu()

    x = torch.randn(8, 8)
    c = torch.compile(f, backend=backend())
    for _ in range(2):
        torch.testing.assert_close(c(x), f(x))
    assert fastdyn.stats()["graphs"] == 2, fastdyn.stats()


def test_training_through_the_backend_matches_eager_gradients():
    m, ref = mlp().train(), mlp().train()
    x = torch.randn(32, 16)
    c = torch.compile(m, backend=backend())
    c(x).square().mean().backward()
    ref(x).square().mean().backward()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


def test_fastdyns_own_hook_stays_on_around_torch_compile():
    fastdyn.enable()
    c = torch.compile(lambda x: x.cos() + 1, backend=backend())
    x = torch.randn(4, 4)
    torch.testing.assert_close(c(x), x.cos() + 1)

    def after(x):  # a frame fastdyn's hook sees only if it is still installed
        return (x * 3).tanh()

    before = fastdyn.stats()["frames_compiled"]
    torch.testing.assert_close(after(x), (x * 3).tanh())
    assert fastdyn.stats()["frames_compiled"] == before + 1, fastdyn.stats()
    assert fastdyn._C.hook_installed()
