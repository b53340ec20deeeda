"""In-place ops on the llvm_cpu backend (codegen/loop/functionalize.cpp): graphs that mutate their
inputs or intermediates compile to kernels that write the caller's tensors, with eager's results,
returned objects, version counters and errors. A write into slices and selects of a tensor
(`ids[:, 1:] = ...`, `x[0].add_(1)`, `x[:, -2:] += 1`) rebuilds the tensor around the written part.
Writes the loops cannot express (into other views, an input overlapping another at run time) run
on ATen, and must be exactly as right."""
import pytest
import torch

from fdcheck import fastdyn

pytestmark = pytest.mark.skipif(fastdyn is None or not fastdyn._C.has_llvm_cpu, reason="built without LLVM")


def backend_of(fn, *args):
    report = fastdyn.explain(fn, *[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    assert len(report.code) == 1, str(report)
    return report.code[0].split("\n", 1)[0]


def run_both(fn, make):
    """fn on fresh inputs eagerly and under fastdyn (twice: the compiled call, then a cached one)."""
    eager_in = make()
    want = fn(*eager_in)
    jf = fastdyn.jit(fn)
    for _ in range(2):
        got_in = make()
        got = jf(*got_in)
        yield eager_in, want, got_in, got


def same_object_positions(ins, out):
    outs = out if isinstance(out, tuple) else (out,)
    return [next((i for i, t in enumerate(ins) if o is t), None) for o in outs]


def check_same(fn, make):
    for eager_in, want, got_in, got in run_both(fn, make):
        for e, g in zip(eager_in, got_in):  # the mutated inputs, and the others untouched
            torch.testing.assert_close(g, e, rtol=1e-6, atol=1e-6)
            assert g._version == e._version
        wants = want if isinstance(want, tuple) else (want,)
        gots = got if isinstance(got, tuple) else (got,)
        for w, g in zip(wants, gots):
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)
        # `out.copy_(x)` returns out itself: so must the compiled graph.
        assert same_object_positions(got_in, got) == same_object_positions(eager_in, want)


def seeded(*shapes, dtype=torch.float32):
    def make():
        g = torch.Generator().manual_seed(0)
        return tuple(torch.randn(*s, generator=g).to(dtype) for s in shapes)
    return make


def copy_(out, x):
    return out.copy_(x)


def add_mul_then_read(x, y):
    x.add_(y)
    x.mul_(2)
    return x * 3


def augmented(x, y):
    x += y
    x -= 1
    return x


def intermediate(x):
    h = x * 2
    h.add_(1)
    h.relu_()
    return h


def masked(x, y):
    x.masked_fill_(y > 0, -1.0)
    return x.clamp_(-0.5, 0.5)


def two_inputs_cross(a, b):
    a.add_(b)
    b.mul_(a)
    return a, b


def swap_copies(a, b):
    a.copy_(b)
    b.copy_(a)
    return a + b


def transpose_add(x):
    return x.add_(x.t())


def flip_copy(x):
    return x.copy_(x.flip(0))


def read_before_and_after(x, y):
    before = x * 1
    x.add_(y)
    return before + x


def adam_like(p, g, m, v):
    # An Adam step's in-place updates (torch.optim's single-tensor path): lerp_, addcmul_, addcdiv_.
    m.lerp_(g, 0.1)
    v.mul_(0.999).addcmul_(g, g, value=0.001)
    p.addcdiv_(m, v.sqrt().add_(1e-8), value=-0.01)
    return p, torch.zeros_like(p).lerp_(p, torch.full_like(p, 0.3))


def write_into_view(x):
    x[0].add_(1)
    return x


def shift_tokens_right(ids):
    # transformers' BART/T5 decoder ids: a new tensor written through a slice and a select.
    shifted = ids.new_zeros(ids.shape)
    shifted[:, 1:] = ids[:, :-1].clone()
    shifted[:, 0] = 2
    shifted.masked_fill_(shifted == -100, 1)
    return shifted * 3


def views_of_views(x, y):
    z = x * 1.5
    z[1][2:5] = y[0, :3]  # a slice of a select
    z[:, -2:] += 1        # reads the written view back and stores it
    z[0].mul_(2)
    return z.sin(), z[1, 2:5]


def augmented_slice_of_input(x, y):
    x[1:, ::1] += y
    return x.sum(0)


NATIVE = {
    "write_into_view": (write_into_view, seeded((4, 5))),
    "shift_tokens_right": (shift_tokens_right, lambda: (torch.randint(-100, 50, (3, 9), generator=torch.Generator().manual_seed(0)),)),
    "views_of_views": (views_of_views, seeded((3, 8), (4, 4))),
    "augmented_slice_of_input": (augmented_slice_of_input, seeded((5, 6), (6,))),
    "adam_like": (adam_like, lambda: tuple(t.abs() if i == 3 else t for i, t in enumerate(seeded((8, 16), (8, 16), (8, 16), (8, 16))()))),
    "copy_same": (copy_, seeded((257,), (257,))),
    "copy_broadcast": (copy_, seeded((4, 33), (33,))),
    "copy_cast_f64_from_f32": (copy_, lambda: (torch.zeros(5, 7, dtype=torch.float64), seeded((5, 7))()[0])),
    "copy_cast_int_from_float": (copy_, lambda: (torch.zeros(19, dtype=torch.int64), seeded((19,))()[0] * 10)),
    "copy_into_transposed": (copy_, lambda: (torch.zeros(9, 5).t(), seeded((5, 9))()[0])),
    "add_mul_then_read": (add_mul_then_read, seeded((64, 33), (33,))),
    "augmented": (augmented, seeded((7, 9), (9,))),
    "intermediate": (intermediate, seeded((3, 17))),
    "masked_clamp": (masked, seeded((6, 6), (6, 6))),
    "two_inputs_cross": (two_inputs_cross, seeded((40,), (40,))),
    "swap_copies": (swap_copies, seeded((12,), (12,))),
    "flip_copy": (flip_copy, seeded((10, 3))),
    "read_before_and_after": (read_before_and_after, seeded((8, 8), (8, 8))),
    "bf16_mul": (lambda x: x.mul_(1.1), seeded((33,), dtype=torch.bfloat16)),
    "int_mul": (lambda x: x.mul_(3), lambda: (torch.arange(-5, 6),)),
}


@pytest.mark.parametrize("name", sorted(NATIVE))
def test_inplace_graph_compiles_natively_and_matches_eager(name):
    fn, make = NATIVE[name]
    assert backend_of(fn, *make()) == "backend llvm_cpu"
    check_same(fn, make)


def write_into_transposed(x):
    x.t()[0].add_(1)
    return x


def write_into_strided_slice(x):
    x[::2].mul_(2)
    return x + 1


def view_then_mutate(x):
    v = x[1:]
    x.mul_(2)
    return v + 1


def returns_a_view_of_the_mutated_input(x):
    x.mul_(2)
    return x[1:]


ON_ATEN = {
    "returns_a_view_of_the_mutated_input": (returns_a_view_of_the_mutated_input, seeded((6,))),
    "write_into_transposed": (write_into_transposed, seeded((4, 5))),
    "write_into_strided_slice": (write_into_strided_slice, seeded((7, 3))),
    "view_then_mutate": (view_then_mutate, seeded((6,))),
}


@pytest.mark.parametrize("name", sorted(ON_ATEN))
def test_mutation_the_loops_cannot_express_runs_on_aten(name):
    fn, make = ON_ATEN[name]
    assert backend_of(fn, *make()) == "backend aten"
    check_same(fn, make)


def test_a_returned_view_of_a_mutated_input_aliases_it():
    x = torch.arange(6.0)
    v = fastdyn.jit(returns_a_view_of_the_mutated_input)(x)
    v.fill_(-1)
    assert torch.equal(x, torch.tensor([0.0, -1, -1, -1, -1, -1]))


def test_input_overlapping_a_mutated_one_at_run_time_matches_eager():
    def add_(a, b):
        return a.add_(b)
    jf = fastdyn.jit(add_)
    jf(torch.randn(8), torch.randn(8))  # compiled for two distinct tensors
    t = torch.arange(8.0)
    want = t.clone()
    want.add_(want)
    assert jf(t, t) is t
    assert torch.equal(t, want)
    buf, ref = torch.arange(9.0), torch.arange(9.0)
    with pytest.raises(RuntimeError) as want:  # partly overlapping views: ATen refuses
        ref[1:].add_(ref[:-1])
    with pytest.raises(RuntimeError) as got:
        jf(buf[1:], buf[:-1])
    assert str(got.value) == str(want.value)
    assert torch.equal(buf, ref)


def test_inference_tensor_mutation_raises_eagers_error_after_the_same_write():
    with torch.inference_mode():
        x, x2 = torch.ones(4), torch.ones(4)
    y = torch.arange(4.0)
    with pytest.raises(RuntimeError) as want:
        x.add_(y)
    jf = fastdyn.jit(lambda a, b: a.add_(b))
    with pytest.raises(RuntimeError) as got:
        jf(x2, y)
    assert str(got.value) == str(want.value)
    assert torch.equal(x2, x)  # eager writes, then refuses to bump the version counter


def test_operand_overlapping_what_is_written_raises_eagers_error():
    x, x2 = seeded((16, 16))()[0], seeded((16, 16))()[0]
    with pytest.raises(RuntimeError) as want:
        transpose_add(x)
    # The write is not captured (eager refuses it): the trace breaks before it, and it raises
    # eagerly, on its own line.
    report = fastdyn.explain(transpose_add, x2.clone())
    assert any("partially overwrites" in b.reason for b in report.break_reasons), str(report)
    with pytest.raises(RuntimeError) as got:
        fastdyn.jit(transpose_add)(x2)
    assert str(got.value) == str(want.value)
    assert torch.equal(x2, x)


def test_expanded_input_mutation_raises_eagers_error():
    x = torch.zeros(3).expand(4, 3)
    with pytest.raises(RuntimeError) as want:
        x.add_(1)
    with pytest.raises(RuntimeError) as got:
        fastdyn.jit(lambda a: a.add_(1))(torch.zeros(3).expand(4, 3))
    assert str(got.value) == str(want.value)


# ---- index_copy_: in place, as an ATen call between the kernels (a static KV cache's update) ----

def cache_step(cache, pos, new, q):
    cache.index_copy_(2, pos, new)
    return torch.softmax(q @ cache.transpose(-1, -2), -1) @ cache


def cache_inputs(step):
    def make():
        g = torch.Generator().manual_seed(step)
        cache = torch.randn(1, 2, 16, 8, generator=g)
        return cache, torch.tensor([step, step + 5]), torch.randn(1, 2, 2, 8, generator=g), torch.randn(1, 2, 1, 8, generator=g)
    return make


def test_index_copy_into_an_input_runs_in_place_between_the_kernels():
    """The cache is written where it lies (no functional copy of it, no write-back): the program
    calls ATen's index_copy_ on the caller's tensor, then its kernels read the new rows."""
    assert backend_of(cache_step, *cache_inputs(0)()) == "backend llvm_cpu"
    assert "aten::index_copy_(%0" in fastdyn.explain(cache_step, *cache_inputs(0)()).code[0]
    for step in range(3):
        check_same(cache_step, cache_inputs(step))
    # One entry serves every step (positions are values, not guards); the same object is written.
    jf = fastdyn.jit(cache_step)
    cache, ref = torch.zeros(1, 2, 16, 8), torch.zeros(1, 2, 16, 8)
    before = fastdyn.stats()["graphs"]
    for step in range(8):
        pos, new, q = torch.tensor([step]), torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8)
        torch.testing.assert_close(jf(cache, pos, new, q), cache_step(ref, pos, new, q))
        assert torch.equal(cache, ref) and cache._version == ref._version
    assert fastdyn.stats()["graphs"] - before == 1


def returns_the_cache(cache, pos, new):
    return cache.index_copy_(0, pos, new * 2)


def read_then_index_copy(cache, pos, new):
    total = cache.sum()
    cache.index_copy_(0, pos, new)
    return total + cache.mean()


def index_copy_twice(cache, pos, new):
    cache.index_copy_(0, pos, new)
    cache.index_copy_(0, pos + 1, new * 3)
    return cache * 2


def index_copy_of_an_intermediate(cache, pos, new):
    h = cache * 2
    h.index_copy_(0, pos, new)
    return h + 1


def rows_inputs():
    g = torch.Generator().manual_seed(1)
    return torch.randn(6, 5, generator=g), torch.tensor([4, 1]), torch.randn(2, 5, generator=g)


def test_index_copy_returning_the_cache_returns_the_callers_tensor():
    assert backend_of(returns_the_cache, *rows_inputs()) == "backend llvm_cpu"
    check_same(returns_the_cache, rows_inputs)


@pytest.mark.parametrize("fn", [read_then_index_copy, index_copy_twice, index_copy_of_an_intermediate])
def test_index_copy_the_program_cannot_run_in_place_runs_on_aten(fn):
    # Its old contents read first, a second writer, or an intermediate written: ATen, as recorded.
    assert backend_of(fn, *rows_inputs()) == "backend aten"
    check_same(fn, rows_inputs)


def test_index_copy_out_of_place_and_refused_calls_match_eager():
    check_same(lambda c, i, s: torch.index_copy(c, 0, i, s) + 1, rows_inputs)
    jf = fastdyn.jit(lambda c, i, s: c.index_copy_(0, i, s))
    for args in [(torch.zeros(6, 5), torch.tensor([1, 2], dtype=torch.int32), torch.ones(2, 5)),  # an int32 index
                 (torch.zeros(6, 5), torch.tensor([1]), torch.ones(2, 5)),                         # too few indices
                 (torch.zeros(6, 5), torch.tensor([1, 2]), torch.ones(2, 5, dtype=torch.float64))]:  # another dtype
        with pytest.raises((RuntimeError, IndexError)) as want:
            args[0].clone().index_copy_(0, args[1], args[2])
        with pytest.raises(want.type) as got:
            jf(*args)
        assert str(got.value) == str(want.value)


def test_copy_into_a_fresh_tensor_keeps_its_layout_not_the_sources():
    # y.copy_(src) writes into y: a returned y has y's strides whatever src's layout (difftest
    # seed 129980: the functional copy took the transposed source's strides).
    def f(t):
        y = t.pow(2)
        y.copy_(t.t())
        return y, t.t().contiguous().copy_(t)

    t = torch.randn(4, 4)
    got, want = fastdyn.jit(f)(t), f(t)
    for g, w in zip(got, want):
        assert torch.equal(g, w) and g.stride() == w.stride(), (g.stride(), w.stride())
