"""optimizer.step() under fastdyn (issue 22): torch.optim's SGD, Adam and AdamW traced into one
graph of in-place updates, their results against eager's, what is guarded, and what stays as
written (the first step, which makes the optimizer's state; a profiler's record_function)."""
import gc
import weakref

import pytest
import torch

from fdcheck import fastdyn


def make(opt_name, seed=0, sizes=((8, 16), (16,), (4, 8), (4,)), device="cpu"):
    g = torch.Generator().manual_seed(seed)
    params = [torch.randn(s, generator=g).to(device).requires_grad_(True) for s in sizes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g).to(device)
    # "_foreach": the multi-tensor implementation (CUDA's default), torch._foreach_* ops;
    # "_fused": fused=True, one ATen op over every parameter (torch._fused_adam_ and friends).
    foreach = opt_name.endswith("_foreach")
    fused = True if opt_name.endswith("_fused") else None
    opt_name = opt_name.removesuffix("_foreach").removesuffix("_fused")
    if opt_name == "sgd":
        opt = torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=foreach, fused=fused)
    elif opt_name == "sgd_nesterov_wd":
        opt = torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01, foreach=foreach, fused=fused)
    elif opt_name == "adam":
        opt = torch.optim.Adam(params, lr=1e-2, foreach=foreach, fused=fused)
    elif opt_name == "adam_wd_maximize":
        opt = torch.optim.Adam(params, lr=1e-2, weight_decay=0.1, maximize=True, foreach=foreach, fused=fused)
    else:
        opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1, foreach=foreach, fused=fused)
    return params, opt


def step_under_enable(opt):
    fastdyn.enable()
    try:
        opt.step()
    finally:
        fastdyn.disable()


def new_grads(params, k):
    g = torch.Generator().manual_seed(100 + k)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g)


@pytest.mark.parametrize("opt_name", ["sgd", "sgd_nesterov_wd", "adam", "adamw", "sgd_foreach", "adam_foreach", "adamw_foreach",
                                      "sgd_fused", "sgd_nesterov_wd_fused", "adam_fused", "adamw_fused", "adam_wd_maximize_fused"])
def test_steps_match_eager_and_compile_to_one_graph(opt_name):
    pe, oe = make(opt_name)
    pf, of = make(opt_name)
    for k in range(6):
        new_grads(pe, k)
        new_grads(pf, k)
        oe.step()
        step_under_enable(of)
        if k == 1:
            fastdyn.synchronize()
    exact = opt_name.startswith("sgd")
    for a, b in zip(pe, pf):
        if exact:
            # SGD's arithmetic is eager's, op for op (a fused kernel may contract a multiply
            # and an add into one rounding).
            torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6)
        else:
            # Adam's bias corrections are float32 tensors on a compiler's path (torch.optim takes
            # it when is_compiling() answers True, as under torch.compile), Python floats in eager.
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    for se, sf in zip(oe.state.values(), of.state.values()):
        assert se.keys() == sf.keys()
        for key in se:
            torch.testing.assert_close(sf[key], se[key], rtol=1e-5, atol=1e-6)
    s = fastdyn.stats()
    # The first step runs as written (it makes the state); the second traces the whole step
    # (profile wrapper, grad-mode wrapper, _init_group, the functional update) into one graph,
    # which serves every later step.
    assert s["recompiles"] <= 1, s
    assert s["cache_hits"] >= 4, s
    code = fastdyn._C.code_text(type(of).step)
    native = "llvm_cpu" if fastdyn._C.has_llvm_cpu else "aten"  # a build without LLVM 19: aten
    assert code is not None and code.startswith(f"backend {native}\n"), code
    if native != "aten":
        # Multi-tensor Adam stacks its step sizes to hand the i-th to the i-th update: each update
        # reads its own (codegen/passes/stacked_scalars.h), with no stack between the kernels.
        assert "aten::stack" not in code, code


def test_the_first_step_runs_as_written_and_is_traced_again_later():
    params, opt = make("adam")
    step_under_enable(opt)  # makes the state: exp_avg, exp_avg_sq, step per parameter
    assert fastdyn.stats()["cache_hits"] == 0
    assert len(opt.state) == len(params)
    step_under_enable(opt)
    step_under_enable(opt)
    assert fastdyn.stats()["cache_hits"] >= 1
    for st in opt.state.values():
        assert st["step"].item() == 3.0


def test_a_state_dict_keyed_by_tensors_is_read_by_key_and_guarded():
    a, b = torch.randn(4), torch.randn(4)
    state = {a: torch.ones(4), b: torch.full((4,), 2.0)}

    def f(d, k):
        return d[k] * 3

    jf = fastdyn.jit(f)
    torch.testing.assert_close(jf(state, a), state[a] * 3)
    torch.testing.assert_close(jf(state, b), state[b] * 3)  # another key: another entry, not a's
    state[a] = torch.full((4,), 5.0)  # a new value under the same key
    torch.testing.assert_close(jf(state, a), torch.full((4,), 15.0))


def test_a_missing_key_of_a_plain_dict_keyed_by_tensors_raises_as_in_eager():
    a, b = torch.randn(4), torch.randn(4)
    state = {a: torch.ones(4)}

    def f(d, k):
        return d[k] * 3

    with pytest.raises(KeyError):
        fastdyn.jit(f)(state, b)


def test_the_compiled_step_keeps_neither_the_parameters_nor_the_optimizer_alive():
    params, opt = make("sgd")
    for _ in range(3):
        step_under_enable(opt)
    fastdyn.synchronize()
    assert fastdyn.stats()["cache_hits"] >= 1
    refs = [weakref.ref(p) for p in params] + [weakref.ref(opt)]
    del params, opt
    gc.collect()
    assert all(r() is None for r in refs)
    # and the entry's guards fail cleanly for a new optimizer whose keys are new tensors
    params, opt = make("sgd", seed=3)
    pe, oe = make("sgd", seed=3)
    for _ in range(3):
        step_under_enable(opt)
        oe.step()
    for a, b in zip(pe, params):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6)


def test_under_a_profiler_the_step_is_still_recorded():
    params, opt = make("sgd")
    for _ in range(3):
        step_under_enable(opt)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step_under_enable(opt)
    names = {e.name for e in prof.events()}
    assert "Optimizer.step#SGD.step" in names, sorted(names)[:20]


def test_addcdiv_with_a_zero_dim_tensor_value():
    def f(p, a, b, v):
        q = p.clone()
        q.addcdiv_(a, b, value=v)
        return q, torch.addcmul(p, a, b, value=v)

    p, a, b = torch.randn(8), torch.randn(8), torch.rand(8) + 0.5
    v = torch.tensor(-0.3)
    got = fastdyn.jit(f)(p, a, b, v)
    torch.testing.assert_close(got[0], p + v * (a / b))
    torch.testing.assert_close(got[1], p + v * (a * b))


def test_itertools_chain_in_a_trace():
    import itertools

    def f(xs, ys):
        out = 0
        for t in itertools.chain(xs, ys):
            out = out + t
        return out

    xs, ys = [torch.randn(3), torch.randn(3)], (torch.randn(3),)
    jf = fastdyn.jit(f)
    torch.testing.assert_close(jf(xs, ys), xs[0] + xs[1] + ys[0])
    assert fastdyn.stats()["graph_breaks"] == 0


def test_foreach_ops_are_recorded_per_tensor():
    def f(xs, ys, zs, steps):
        torch._foreach_add_(xs, ys, alpha=0.5)
        torch._foreach_mul_(zs, 0.9)
        torch._foreach_addcmul_(zs, xs, ys, 0.1)
        sq = torch._foreach_sqrt(zs)
        bc = torch._foreach_pow(0.9, steps)
        scales = torch.stack([(1 - b) * -0.01 for b in bc])
        torch._foreach_addcdiv_(xs, ys, sq, scales)
        return sq

    def inputs():
        g = torch.Generator().manual_seed(0)
        xs = [torch.randn(5, generator=g), torch.randn(3, 2, generator=g)]
        ys = [torch.randn(5, generator=g), torch.randn(3, 2, generator=g)]
        zs = [torch.rand(5, generator=g) + 0.1, torch.rand(3, 2, generator=g) + 0.1]
        return xs, ys, zs, [torch.tensor(3.0), torch.tensor(4.0)]

    want_in, got_in = inputs(), inputs()
    want = f(*want_in)
    got = fastdyn.jit(f)(*got_in)
    assert fastdyn.stats()["graph_breaks"] == 0
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    for la, lb in zip(got_in, want_in):
        for a, b in zip(la, lb):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
def test_a_tensor_learning_rate_follows_its_scheduler_without_recompiling(opt_name):
    # torch.compile's recipe for schedulers: a tensor lr, which the scheduler fills in place.
    def make_with_scheduler():
        params, _ = make("sgd")
        lr = torch.tensor(0.1)
        opt = torch.optim.SGD(params, lr=lr, momentum=0.9) if opt_name == "sgd" else torch.optim.Adam(params, lr=lr)
        return params, opt, torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.8)

    pe, oe, se = make_with_scheduler()
    pf, of, sf = make_with_scheduler()
    for _ in range(8):
        oe.step()
        se.step()
        step_under_enable(of)
        sf.step()
    for a, b in zip(pe, pf):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    s = fastdyn.stats()
    assert s["recompiles"] <= 1 and s["cache_hits"] >= 6, s


def test_add_with_a_zero_dim_tensor_alpha():
    def f(x, y, a):
        z = x.clone()
        z.add_(y, alpha=-a)
        return z, torch.sub(x, y, alpha=a)

    x, y, a = torch.randn(6), torch.randn(6), torch.tensor(0.25)
    got = fastdyn.jit(f)(x, y, a)
    assert fastdyn.stats()["graph_breaks"] == 0
    torch.testing.assert_close(got[0], x - 0.25 * y)
    torch.testing.assert_close(got[1], x - 0.25 * y)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("opt_name", ["sgd", "sgd_nesterov_wd", "adam", "adamw", "sgd_foreach", "adam_foreach", "adamw_foreach",
                                      "sgd_fused", "adam_fused", "adamw_fused"])
def test_on_a_gpu(opt_name):
    # On a GPU the step compiles with the cuda backend: the per-parameter updates launch together
    # (horizontal fusion), and Adam's step counts stay CPU tensors as in eager, incremented on the
    # host, their bias corrections passed to the GPU kernels by value.
    sizes = ((8, 16), (16,), (4, 8), (4,), (33, 7), (1000,))
    pe, oe = make(opt_name, device="cuda", sizes=sizes)
    pf, of = make(opt_name, device="cuda", sizes=sizes)
    for k in range(5):
        g = torch.Generator().manual_seed(100 + k)
        for a, b in zip(pe, pf):
            a.grad = torch.randn(a.shape, generator=g).cuda()
            b.grad = a.grad.clone()
        oe.step()
        step_under_enable(of)
        if k == 1:
            fastdyn.synchronize()
    torch.cuda.synchronize()
    for a, b in zip(pe, pf):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    for se, sf in zip(oe.state.values(), of.state.values()):
        assert se.keys() == sf.keys()
        for key in se:
            assert sf[key].device == se[key].device, key  # the step count stays where eager keeps it
            torch.testing.assert_close(sf[key], se[key], rtol=1e-5, atol=1e-6)
    code = fastdyn._C.code_text(type(of).step)
    assert code is not None and code.startswith("backend cuda\n"), (opt_name, code, fastdyn.stats())
    assert "launch as one" in code, code
    assert fastdyn.stats()["recompiles"] <= 1, fastdyn.stats()


def test_fused_amsgrad_is_traced():
    # amsgrad keeps the largest second moment so far (max_exp_avg_sqs, written each step) and
    # divides by it: traced like the rest of the fused step (it ran as written before).
    def make_amsgrad():
        g = torch.Generator().manual_seed(0)
        params = [torch.randn(s, generator=g).requires_grad_(True) for s in ((8, 16), (16,))]
        for p in params:
            p.grad = torch.randn(p.shape, generator=g)
        return params, torch.optim.Adam(params, lr=1e-2, amsgrad=True, fused=True)

    pe, oe = make_amsgrad()
    pf, of = make_amsgrad()
    for k in range(6):
        # Gradients that shrink, then grow: the maximum stays, then moves.
        scale = 1.0 / (k + 1) if k < 3 else float(k)
        new_grads(pe, k)
        new_grads(pf, k)
        for a, b in zip(pe, pf):
            a.grad.mul_(scale)
            b.grad.mul_(scale)
        oe.step()
        step_under_enable(of)
        if k == 1:
            fastdyn.synchronize()
    for a, b in zip(pe, pf):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    for se, sf in zip(oe.state.values(), of.state.values()):
        assert se.keys() == sf.keys() and "max_exp_avg_sq" in se
        for key in se:
            torch.testing.assert_close(sf[key], se[key], rtol=1e-5, atol=1e-6)
    assert fastdyn._C.code_text(type(of).step) is not None, "the amsgrad step compiles"

def scaled_steps(opt_name, device, compiled):
    """Six GradScaler steps (scale, backward, scaler.step, update) of a small model, an inf in
    the third step's input: its gradients are not finite, the step is skipped and the scale
    halves. Returns the parameters, their gradients and the scales after each step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)).to(device)
    params = list(model.parameters())
    if opt_name == "sgd_fused":
        opt = torch.optim.SGD(params, lr=0.1, momentum=0.9, fused=True)
    else:
        opt = (torch.optim.AdamW if opt_name == "adamw_fused" else torch.optim.Adam)(params, lr=1e-2, weight_decay=0.1, fused=True)
    scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 10)
    history = []
    for k in range(6):
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(k)).to(device)
        if k == 2:
            x[0, 0] = float("inf")
        opt.zero_grad()
        scaler.scale(model(x).pow(2).mean()).backward()
        if compiled:
            fastdyn.enable()
        try:
            scaler.step(opt)
        finally:
            fastdyn.disable()
        scaler.update()
        history.append(([p.detach().clone() for p in params], [p.grad.clone() for p in params], scaler.get_scale()))
    return history, opt


def check_scaled_steps(opt_name, device):
    eager, _ = scaled_steps(opt_name, device, compiled=False)
    got, opt = scaled_steps(opt_name, device, compiled=True)
    for k, ((pe, ge, se), (pf, gf, sf)) in enumerate(zip(eager, got)):
        assert se == sf, (k, se, sf)
        for a, b in zip(pe, pf):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
        # The fused op writes the gradients back unscaled: exactly eager's at the first step,
        # from parameters a few roundings apart later. At the step with an inf they stay scaled,
        # made by autograd from non-finite values: compared by where they are NaN.
        for a, b in zip(ge, gf):
            if k == 2:
                assert torch.equal(a.isnan(), b.isnan())
            else:
                torch.testing.assert_close(b, a, rtol=0 if k == 0 else 1e-5, atol=0 if k == 0 else 1e-6)
    for a, b in zip(eager[2][0], eager[1][0]):
        assert torch.equal(a, b), "the step with an inf leaves the parameters"
    code = fastdyn._C.code_text(type(opt).step)
    assert code is not None, "the scaled fused step compiles"
    return code


@pytest.mark.parametrize("opt_name", ["sgd_fused", "adam_fused", "adamw_fused"])
def test_a_grad_scalers_fused_step_is_traced(opt_name):
    # Under a GradScaler the fused op takes grad_scale and found_inf: the trace divides each
    # gradient by the scale, writes it back unscaled, and keeps every tensor as it was where
    # found_inf is 1 (symbolic/fused_optimizers.cpp Writes), as ATen's kernels do.
    check_scaled_steps(opt_name, "cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("opt_name", ["sgd_fused", "adam_fused", "adamw_fused"])
def test_a_grad_scalers_fused_step_on_a_gpu(opt_name):
    code = check_scaled_steps(opt_name, "cuda")
    assert code.startswith("backend cuda\n") and "launch as one" in code, code
