"""Namedtuples in and out of compiled frames, and builtin sum() over tensors
(symbolic/conversions.cpp wraps a namedtuple argument field by field; calls.cpp folds
namedtuple construction, tuple.__new__ and sum(); compiled_graph.cpp returns a namedtuple by
tuple.__new__ without running its generated __new__)."""
import collections
import typing

import pytest
import torch

from fdcheck import fastdyn

pytestmark = pytest.mark.skipif(fastdyn is None, reason="needs fastdyn")

P = collections.namedtuple("P", "a b")


class Pair(typing.NamedTuple):
    first: torch.Tensor
    second: torch.Tensor
    weight: float = 0.5


class Scaled(collections.namedtuple("Scaled", "a b")):
    """A namedtuple with a __new__ of its own: user code that changes the fields."""

    def __new__(cls, a, b):
        return super().__new__(cls, a * 10, b)


@pytest.fixture(autouse=True)
def fresh():
    fastdyn.reset()
    fastdyn.set_background_compile(False)
    yield
    fastdyn.set_background_compile(True)


def same(got, want):
    assert type(got) is type(want)
    if isinstance(want, tuple):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w)
    elif isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want)
        assert got.dtype == want.dtype
    else:
        assert got == want


def one_graph(f, *args):
    e = fastdyn.explain(f, *args)
    assert e.graph_count == 1 and e.graph_break_count == 0, e


def test_a_namedtuple_argument_is_read_field_by_field():
    def f(p):
        a, b = p
        return p.a - b + a * p.b, p[1].sum()

    x, y = torch.randn(4, 8), torch.randn(4, 8)
    one_graph(f, P(x, y))
    j = fastdyn.jit(f)
    for _ in range(2):
        same(j(P(x, y)), f(P(x, y)))
    # New tensors in a new namedtuple of the same class: the same entry, the new values.
    x2, y2 = torch.randn(4, 8), torch.randn(4, 8)
    misses = fastdyn.stats()["cache_misses"]
    same(j(P(x2, y2)), f(P(x2, y2)))
    assert fastdyn.stats()["cache_misses"] == misses
    # Another class with the same fields is not the same input.
    Q = collections.namedtuple("Q", "a b")
    same(j(Q(x, y)), f(Q(x, y)))
    assert fastdyn.stats()["cache_misses"] == misses + 1


def test_namedtuples_returned_are_made_without_their_generated_new():
    cases = [lambda x: P(x + 1, x * 2), lambda x: Pair(x + 1, x * 2), lambda x: torch.max(x, 0)]
    x = torch.randn(3, 5)
    for f in cases:
        one_graph(f, x)
        j = fastdyn.jit(f)
        same(j(x), f(x))
        seen = fastdyn.stats()["frames_seen"]
        same(j(x), f(x))
        # Only the frame itself: no Python frame of the namedtuple's __new__.
        assert fastdyn.stats()["frames_seen"] == seen + 1, f


def test_a_namedtuple_with_its_own_new_runs_it():
    # The trace used to make Scaled(x, x) as if its fields were taken as given: c.a read x, not x * 10.
    def f(x):
        c = Scaled(x, x + 1)
        return c.a + c.b

    x = torch.randn(3)
    j = fastdyn.jit(f)
    for _ in range(2):
        same(j(x), f(x))
    g = lambda x: Scaled(x, x)  # noqa: E731
    same(fastdyn.jit(g)(x), g(x))


class Framed(collections.namedtuple("Framed", "a b")):
    """inspect.FrameInfo's shape: a subclass whose __new__ calls the generated one through super()."""

    def __new__(cls, a, b, note=None):
        instance = super().__new__(cls, a, b)
        instance.note = note
        return instance


def test_a_subclass_new_calling_the_generated_one_is_not_rerun():
    # The generated __new__, compiled on its own (super().__new__ from eager code), returns an
    # instance of the subclass: it must be made as tuple.__new__ makes it, not by calling the
    # subclass (whose __new__ would call it again, without end: CPython's test_coroutines).
    fastdyn.enable()
    try:
        for _ in range(3):
            f = Framed(1, 2, note="n")
            assert type(f) is Framed and tuple(f) == (1, 2) and f.note == "n"
            t = Framed(torch.ones(2), 3)
            assert torch.equal(t.a, torch.ones(2)) and t.b == 3 and t.note is None
    finally:
        fastdyn.disable()


def test_sum_of_tensors_adds_like_eager():
    x, y, z = torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 8)
    cases = {
        "list": lambda xs: sum(xs),
        "start": lambda xs: sum(xs[1:], xs[0]),
        "start_keyword": lambda xs: sum(xs, start=torch.ones(8)),
        "generator": lambda xs: sum(t * i for i, t in enumerate(xs)),
        "mixed_ints": lambda xs: sum([xs[0], 2, xs[1]]),
        "bools": lambda xs: sum([xs[0] > 0, xs[1] > 0]),  # 0 + a bool tensor is int64 in eager
    }
    for name, f in cases.items():
        one_graph(f, [x, y, z])
        same(fastdyn.jit(f)([x, y, z]), f([x, y, z]))


def test_sum_exhausts_an_iterator_as_eager_does():
    def f(xs):
        it = iter(xs)
        s = sum(it)
        return s, next(it, None) is None

    xs = [torch.randn(3), torch.randn(3)]
    same(fastdyn.jit(f)(xs), f(xs))


def test_sum_of_floats_is_left_to_python():
    # CPython sums floats its own way (compensated from 3.12): never re-associated in the trace.
    def f(x, vals):
        return x * sum(vals)

    x = torch.randn(3)
    vals = [0.1, 0.2, 0.3, 1e16, -1e16]
    same(fastdyn.jit(f)(x, vals), f(x, vals))
