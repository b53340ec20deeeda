"""pytest configuration of the end-to-end suite.

Every test starts from a clean fastdyn (caches and stats reset, hook disabled) and a fixed seed,
and after every test the autouse fixture proves that fastdyn.disable() really left the process
clean: a plain function called afterwards must not be seen by the hook.
Helpers live in fdcheck.py (`check`, `assert_same`, ...).
"""
import pytest
import torch

from fdcheck import IMPORT_ERROR, fastdyn


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "no_fastdyn: the test checks the suite itself and does not need fastdyn")
    config.addinivalue_line(
        "markers", "backend_failure_expected: the test makes a backend fail on purpose (strict mode's own tests)")


def _probe(x):
    return x + 1


def _hook_sees_plain_frames():
    before = fastdyn.stats()["frames_seen"]
    _probe(torch.ones(2))
    return fastdyn.stats()["frames_seen"] != before


@pytest.fixture(autouse=True)
def reset(request):
    torch.manual_seed(0)
    if request.node.get_closest_marker("no_fastdyn"):
        yield
        return
    if fastdyn is None:
        pytest.fail("import fastdyn failed:\n" + IMPORT_ERROR, pytrace=False)
    fastdyn.disable()
    fastdyn.reset()
    # Kernels compile on the calling thread, so that a test's first call runs them (the numerical
    # sweeps check kernels, not ATen); test_background_compile.py turns tiered compilation on.
    fastdyn.set_background_compile(False)
    # Strict mode: a compiler or backend failure that fastdyn would hide from a user by running the
    # graph on aten fails the test that caused it, naming the node (fastdyn._C.set_strict).
    fastdyn._C.set_strict(True)
    grad_mode = torch.is_grad_enabled()
    yield
    torch.set_grad_enabled(grad_mode)
    fastdyn.synchronize()
    failures = fastdyn.stats()["backend_failures"]
    fastdyn._C.set_strict(False)
    assert failures == 0 or request.node.get_closest_marker("backend_failure_expected"), (
        f"{failures} graph(s) ran on aten because compiling them failed (see the log above)")
    fastdyn.set_background_compile(True)
    fastdyn.disable()
    fastdyn.reset()
    assert not _hook_sees_plain_frames(), (
        "after fastdyn.disable() the hook still sees the frames of plain functions")
    fastdyn.reset()


@pytest.fixture
def check():
    from fdcheck import check as check_fn
    return check_fn


@pytest.fixture
def synchronous_compile():
    """Kernels compile before the first call returns (no ATen baseline tier): a test that checks
    what a compiled graph does sees it from the first call. The `reset` fixture restores it."""
    fastdyn.set_background_compile(False)
