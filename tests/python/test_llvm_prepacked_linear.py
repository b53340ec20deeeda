"""Linear layers through oneDNN with the weight reordered once (codegen/aten/prepacked_linear.h): the
cached reorder is used only while the weight is unchanged, so every update is seen, and results
match eager's at float32 matmul tolerance."""
import pytest
import torch
import torch.nn.functional as F

from fdcheck import fastdyn

pytestmark = pytest.mark.skipif(fastdyn is None or not fastdyn._C.has_llvm_cpu or not torch.backends.mkldnn.is_available(),
                                reason="needs llvm_cpu and oneDNN")


def lin_gelu(x, w, b):
    return F.gelu(F.linear(x, w, b))


def close(got, want):
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_big_linear_runs_on_onednn_and_matches_eager():
    x, w, b = torch.randn(64, 256), torch.randn(512, 256) / 16, torch.randn(512)
    assert "oneDNN" in fastdyn.explain(lin_gelu, x, w, b).code[0]
    f = fastdyn.jit(lin_gelu)
    for _ in range(4):  # plain ATen first, then reordered, then from the cache
        close(f(x, w, b), lin_gelu(x, w, b))


def test_small_linear_stays_on_aten():
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    assert "oneDNN" not in fastdyn.explain(lin_gelu, x, w, None).code[0]


def test_every_weight_update_is_seen():
    x, w, b = torch.randn(3, 64, 128), torch.randn(300, 128) / 12, torch.randn(300)
    f = fastdyn.jit(lin_gelu)
    for _ in range(3):
        f(x, w, b)  # the reorder is cached by now
    with torch.no_grad():
        w.mul_(-2)  # in place: version counter
    close(f(x, w, b), lin_gelu(x, w, b))
    close(f(x, w, b), lin_gelu(x, w, b))
    w.data = torch.randn(300, 128) / 12  # new storage, same tensor object
    close(f(x, w, b), lin_gelu(x, w, b))
    close(f(x, w, b), lin_gelu(x, w, b))
    w2 = w.clone()  # another tensor of the same shape
    close(f(x, w2, b), lin_gelu(x, w2, b))
    w2.copy_(torch.randn(300, 128) / 12)
    close(f(x, w2, b), lin_gelu(x, w2, b))


def test_nn_linear_module_under_no_grad():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).eval()
    x = torch.randn(32, 256)
    jm = fastdyn.jit(m)
    assert m[0].weight.requires_grad  # parameters: the reorder is fine under no_grad
    with torch.no_grad():
        assert "oneDNN" in fastdyn.explain(m, x).code[0]
        want = m(x)
        for _ in range(3):
            close(jm(x), want)


def conv1d(x, w, b):  # GPT-2's Conv1D: addmm with a [in, out] weight
    return torch.addmm(b, x.view(-1, x.shape[-1]), w).view(x.shape[0], x.shape[1], -1).relu()


def test_addmm_with_an_in_out_weight_runs_on_onednn_and_sees_updates():
    x, w, b = torch.randn(2, 32, 128), torch.randn(128, 384) / 12, torch.randn(384)
    assert "oneDNN" in fastdyn.explain(conv1d, x, w, b).code[0]
    f = fastdyn.jit(conv1d)
    for _ in range(3):
        close(f(x, w, b), conv1d(x, w, b))
    with torch.no_grad():
        w[0].zero_()  # through a view: the shared version counter moves
    close(f(x, w, b), conv1d(x, w, b))
    close(f(x, w, b), conv1d(x, w, b))


def test_a_whole_weight_write_through_data_is_seen():
    # `.data` gives a tensor with its own version counter: an in-place write through it (an EMA
    # or re-init idiom) leaves the weight's version as it was. The sample of its bits sees it.
    m = torch.nn.Linear(256, 256)
    x = torch.ones(64, 256)
    f = fastdyn.jit(m)
    with torch.no_grad():
        for _ in range(3):
            f(x)  # reordered and cached by now
        m.weight.data.mul_(2.0)
        close(f(x), m(x))
        m.weight.data.normal_()
        close(f(x), m(x))


def test_fastdyn_prepack_0_keeps_linears_on_aten():
    import subprocess
    import sys
    code = ("import torch, fastdyn, torch.nn.functional as F\n"
            "x, w = torch.randn(64, 256), torch.randn(512, 256)\n"
            "print('oneDNN' in fastdyn.explain(lambda x, w: F.linear(x, w), x, w).code[0])\n")
    for env, want in [("0", "False"), ("1", "True")]:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**__import__("os").environ, "FASTDYN_PREPACK": env}, check=True)
        assert out.stdout.strip().splitlines()[-1] == want, out.stdout + out.stderr
