"""The frame-evaluation hook as a user meets it: enable/disable, threads, exceptions and tracebacks,
generators, the recompile bound, fastdyn.skip, frames without tensors, fullgraph=True and
GraphBreakError, and FASTDYN_LOG.

Functions that must break capture carry a `# BREAK` comment on the line that breaks it; the
tests demand that fastdyn names exactly that file and line.
"""
import asyncio
import os
import re
import subprocess
import sys
import textwrap
import threading
import traceback

import warnings

import pytest
import torch

from fdcheck import assert_same, call_with_stats, fastdyn, line_of, stats_delta


def plain(x):
    return x * 2 + 1


def other_plain(x):
    return x - 3


def uses_helper(x):
    return plain(x) * 3


# --------------------------------------------------------------------------- enable / disable

def test_enable_compiles_plain_functions_and_disable_stops_it():
    x = torch.randn(3, 4)
    fastdyn.enable()
    try:  # NB: no Python helpers in enabled regions, so only the frames under test are seen
        s0 = fastdyn.stats()
        out1 = plain(x)
        s1 = fastdyn.stats()
        out2 = plain(x)
        s2 = fastdyn.stats()
    finally:
        fastdyn.disable()
    d1, d2 = stats_delta(s0, s1), stats_delta(s1, s2)
    assert_same(out1, plain(x))
    assert_same(out2, plain(x))
    assert d1["frames_compiled"] == 1, f"enable(): the first call must compile: {d1}"
    assert d2["cache_hits"] == 1 and d2["frames_compiled"] == 0, f"second call must hit: {d2}"
    out, d = call_with_stats(other_plain, x)
    assert d["frames_seen"] == 0 and d["frames_compiled"] == 0, f"after disable(): {d}"
    assert_same(out, other_plain(x))


def test_enable_twice_does_not_hook_twice():
    x = torch.randn(3, 4)
    fastdyn.enable()
    fastdyn.enable()
    try:
        s0 = fastdyn.stats()
        plain(x)
        s1 = fastdyn.stats()
        plain(x)
        s2 = fastdyn.stats()
    finally:
        fastdyn.disable()
        fastdyn.disable()
    d1, d2 = stats_delta(s0, s1), stats_delta(s1, s2)
    assert d1["frames_compiled"] == 1 and d1["cache_misses"] == 1, d1
    assert d2["cache_hits"] == 1, f"a doubly installed hook would count two hits: {d2}"
    _, d = call_with_stats(other_plain, x)
    assert d["frames_seen"] == 0, f"balanced enable/disable pairs must leave fastdyn off: {d}"


def test_disable_without_enable_is_harmless():
    fastdyn.disable()
    fastdyn.disable()
    x = torch.randn(2)
    _, d = call_with_stats(plain, x)
    assert d["frames_seen"] == 0, d
    assert_same(fastdyn.jit(plain)(x), plain(x))


def test_jit_wrapper_keeps_working_across_enable_and_disable():
    f = fastdyn.jit(plain)
    x = torch.randn(3)
    f(x)
    fastdyn.enable()
    try:
        s0 = fastdyn.stats()
        out = f(x)
        s1 = fastdyn.stats()
    finally:
        fastdyn.disable()
    d = stats_delta(s0, s1)
    assert_same(out, plain(x))
    assert d["cache_hits"] == 1 and d["frames_compiled"] == 0, d
    out, d = call_with_stats(f, x)
    assert_same(out, plain(x))
    assert d["cache_hits"] == 1, f"disable() must not switch off the jit wrapper: {d}"


def test_enable_compiles_callees_of_plain_functions():
    x = torch.randn(3)
    fastdyn.enable()
    try:
        s0 = fastdyn.stats()
        out = uses_helper(x)
        s1 = fastdyn.stats()
    finally:
        fastdyn.disable()
    d = stats_delta(s0, s1)
    assert_same(out, uses_helper(x))
    # uses_helper calls a Python function, so it runs eagerly; plain is straight-line.
    assert d["frames_compiled"] >= 1, d


# --------------------------------------------------------------------------- threads

def run_in_threads(targets):
    errors = []

    def guarded(target):
        try:
            target()
        except BaseException:  # report every failure of the thread to the test
            errors.append(traceback.format_exc())
    threads = [threading.Thread(target=guarded, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a thread hung"
    assert not errors, "\n".join(errors)


def test_two_threads_run_jitted_functions_concurrently():
    def mlp(x, w):
        return torch.nn.functional.gelu(x @ w).sum(-1)

    f = fastdyn.jit(mlp)

    def worker(rows, cols):
        x, w = torch.randn(rows, 16), torch.randn(16, cols)
        expected = mlp(x, w)
        for _ in range(300):
            assert_same(f(x, w), expected)
    run_in_threads([lambda: worker(4, 8), lambda: worker(5, 3)])


def test_two_threads_under_enable():
    def worker(shape):
        x = torch.randn(*shape)
        for _ in range(300):
            assert_same(plain(x), x * 2 + 1)
            assert_same(other_plain(x), x - 3)
    fastdyn.enable()
    try:
        run_in_threads([lambda: worker((3, 4)), lambda: worker((7,))])
    finally:
        fastdyn.disable()
    assert fastdyn.stats()["frames_compiled"] >= 2


def test_jit_mode_does_not_leak_into_other_threads():
    inside, release = threading.Event(), threading.Event()

    def block():
        inside.set()
        release.wait(30)

    def outer(x):
        block()
        return x + 1

    f = fastdyn.jit(outer)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("out", f(torch.ones(2))))
    t.start()
    try:
        assert inside.wait(30)
        x = torch.randn(3)
        _, d = call_with_stats(plain, x)  # this thread never asked for fastdyn
        _, d2 = call_with_stats(plain, x)
    finally:
        release.set()
        t.join(30)
    assert d["frames_compiled"] == 0 and d["frames_seen"] == 0, d
    assert d2["frames_seen"] == 0, d2
    assert_same(result["out"], torch.full((2,), 2.0))


def test_hook_reads_code_extra_directly_and_agrees_with_the_api():
    # The per-frame path reads co_extra's private layout after one probe at import; on 3.11 and
    # 3.12 the probe must pass, or every frame pays a libpython call again.
    assert fastdyn._C.hook_reads_code_extra_directly()
    x = torch.randn(3)
    f = fastdyn.jit(plain)
    assert_same(f(x), plain(x))
    assert fastdyn._C.cache_size(plain) == 1  # the state the hook stored is the state it reads
    _, d = call_with_stats(f, x)
    assert d["cache_hits"] == 1 and d["frames_compiled"] == 0, d


# --------------------------------------------------------------------------- exceptions

def fails_in_eager_frame(x):
    y = x + 1
    if y.sum() > -1e9:  # a tensor-valued branch: the frame runs eagerly
        raise ValueError("raised by user code")  # RAISE
    return y


def fails_at_trace_time(x, w):
    return x @ w  # RAISE


def fails_inside_graph(x, i):
    y = x * 2
    return y[i]  # RAISE


def fails_early_inside_graph(x, i):
    y = x[i]  # RAISE
    z = y * 2
    return z + 1


def helper_that_raises(x):
    raise KeyError("from the helper")  # RAISE


def calls_raising_helper(x):
    y = x + 1
    return helper_that_raises(y)  # CALL


def frames_of(exc_info):
    return [(fr.name, fr.lineno) for fr in traceback.extract_tb(exc_info.tb)]


def test_exception_in_eager_fallback_keeps_user_traceback():
    f = fastdyn.jit(fails_in_eager_frame)
    for _ in range(2):
        with pytest.raises(ValueError, match="raised by user code") as info:
            f(torch.randn(3))
        assert ("fails_in_eager_frame", line_of(fails_in_eager_frame, "# RAISE")) in frames_of(info)


def test_shape_error_at_first_call_raises_eagers_error_from_user_line():
    x, w = torch.randn(3, 4), torch.randn(5, 6)
    with pytest.raises(RuntimeError) as eager:
        fails_at_trace_time(x, w)
    f = fastdyn.jit(fails_at_trace_time)
    with pytest.raises(RuntimeError) as info:
        f(x, w)
    assert str(info.value) == str(eager.value)
    assert ("fails_at_trace_time", line_of(fails_at_trace_time, "# RAISE")) in frames_of(info)
    # The function still compiles and runs for good inputs afterwards.
    good = torch.randn(4, 6)
    assert_same(f(x, good), x @ good)


def test_exception_inside_a_compiled_graph_propagates():
    f = fastdyn.jit(fails_inside_graph)
    x = torch.randn(5, 3)
    ok = torch.tensor([0, 4, 2])
    assert_same(f(x, ok), fails_inside_graph(x, ok))
    bad = torch.tensor([0, 99, 2])  # same metadata: a cache hit that fails while running
    with pytest.raises(IndexError) as eager:
        fails_inside_graph(x, bad)
    with pytest.raises(type(eager.value)) as info:
        f(x, bad)
    names = [name for name, _ in frames_of(info)]
    assert "fails_inside_graph" in names, f"the user's frame is missing from {frames_of(info)}"
    lineno = dict(frames_of(info))["fails_inside_graph"]
    first = fails_inside_graph.__code__.co_firstlineno
    assert first <= lineno <= line_of(fails_inside_graph, "# RAISE"), (
        f"line {lineno} is outside fails_inside_graph")
    assert_same(f(x, ok), fails_inside_graph(x, ok))  # still usable afterwards


def test_exception_inside_a_compiled_graph_names_the_failing_line():
    f = fastdyn.jit(fails_early_inside_graph)
    x = torch.randn(5, 3)
    f(x, torch.tensor([1, 2]))
    with pytest.raises(IndexError) as info:
        f(x, torch.tensor([1, 99]))
    frames = frames_of(info)
    expected = ("fails_early_inside_graph", line_of(fails_early_inside_graph, "# RAISE"))
    assert expected in frames, f"the traceback should point at the failing op's line: {frames}"


def mutates_then_fails(x, i):
    x.add_(1)
    return x[i] * 2  # RAISE


def test_exception_after_an_in_place_op_applies_it_exactly_once():
    f = fastdyn.jit(mutates_then_fails)
    f(torch.zeros(4), torch.tensor([1]))
    eager_x, jit_x = torch.zeros(4), torch.zeros(4)
    bad = torch.tensor([7])
    with pytest.raises(IndexError) as eager:
        mutates_then_fails(eager_x, bad)
    with pytest.raises(type(eager.value)) as info:
        f(jit_x, bad)
    assert_same(jit_x, eager_x, "the input mutated before the error")
    assert "mutates_then_fails" in [name for name, _ in frames_of(info)]


def test_exception_from_a_callee_keeps_both_frames():
    f = fastdyn.jit(calls_raising_helper)
    with pytest.raises(KeyError) as info:
        f(torch.randn(2))
    frames = frames_of(info)
    assert ("calls_raising_helper", line_of(calls_raising_helper, "# CALL")) in frames, frames
    assert ("helper_that_raises", line_of(helper_that_raises, "# RAISE")) in frames, frames


def test_exception_under_enable_keeps_user_traceback():
    fastdyn.enable()
    try:
        try:
            calls_raising_helper(torch.randn(2))
        except KeyError:
            tb = traceback.extract_tb(sys.exc_info()[2])
        else:
            tb = None
    finally:
        fastdyn.disable()
    assert tb is not None, "the KeyError was swallowed"
    frames = [(fr.name, fr.lineno) for fr in tb]
    assert ("helper_that_raises", line_of(helper_that_raises, "# RAISE")) in frames, frames


# --------------------------------------------------------------------------- generators

def tensor_generator(x):
    yield x + 1
    yield x * 2
    yield torch.relu(x)


def looping_generator(x, n):
    for i in range(n):
        yield x * i


def generator_with_handler(x):
    try:
        yield x + 1
    except ValueError:
        yield x * 10


async def tensor_coroutine(x):
    return torch.tanh(x) * 2


def test_generators_are_untouched_under_enable():
    x = torch.randn(3)
    fastdyn.enable()
    try:
        before = fastdyn.stats()
        got = list(tensor_generator(x))
        got_loop = list(looping_generator(x, 4))
        g = generator_with_handler(x)
        first = next(g)
        thrown = g.throw(ValueError("into the generator"))
        after = fastdyn.stats()
    finally:
        fastdyn.disable()
    assert_same(got, [x + 1, x * 2, torch.relu(x)])
    assert_same(got_loop, [x * i for i in range(4)])
    assert_same(first, x + 1)
    assert_same(thrown, x * 10)
    d = stats_delta(before, after)
    assert d["frames_compiled"] == 0 and d["graphs"] == 0, f"generator frames must run by default: {d}"


def test_jit_of_a_generator_function_yields_the_right_values():
    x = torch.randn(3)
    got = list(fastdyn.jit(tensor_generator)(x))
    assert_same(got, [x + 1, x * 2, torch.relu(x)])


def test_coroutines_are_untouched():
    x = torch.randn(3)
    fastdyn.enable()
    try:
        got = asyncio.run(tensor_coroutine(x))
    finally:
        fastdyn.disable()
    assert_same(got, torch.tanh(x) * 2)


# --------------------------------------------------------------------------- recursion, tracing

def recurse(x, n):
    if n == 0:
        return x
    return recurse(x + 1, n - 1)


def recurse_forever(x):
    return recurse_forever(x + 1)


def test_deep_and_infinite_recursion_under_enable():
    fastdyn.enable()
    try:
        deep = recurse(torch.zeros(2), 800)
        try:
            recurse_forever(torch.zeros(2))
        except RecursionError:
            overflow = "RecursionError"
        else:
            overflow = None
    finally:
        fastdyn.disable()
    assert_same(deep, torch.full((2,), 800.0))
    assert overflow == "RecursionError", "infinite recursion must end in RecursionError"


def traced_by_a_debugger(x):
    y = x * 2
    return y + 1


def test_a_tracing_debugger_still_sees_every_line():
    f = fastdyn.jit(traced_by_a_debugger)
    f(torch.ones(2))  # compiled and cached
    first = traced_by_a_debugger.__code__.co_firstlineno
    events = []

    def tracer(frame, event, arg):
        if frame.f_code is traced_by_a_debugger.__code__:
            events.append((event, frame.f_lineno - first))
            return tracer
        return None
    sys.settrace(tracer)
    try:
        out = f(torch.ones(2))
    finally:
        sys.settrace(None)
    assert_same(out, torch.full((2,), 3.0))
    assert [e for e in events if e[0] == "line"] == [("line", 1), ("line", 2)], events


# --------------------------------------------------------------------------- the recompile bound

def bounded(x):
    return x * 3 - 1


def test_recompile_bound_falls_back_to_eager():
    f = fastdyn.jit(bounded)
    # Twelve ranks: twelve shapes that no dynamic-shape generalisation can merge.
    inputs = [torch.randn(*([2] * rank)) for rank in range(1, 13)]
    compiled = []
    for x in inputs:
        out, d = call_with_stats(f, x)
        assert_same(out, bounded(x), f"rank {x.ndim}")
        compiled.append(d["frames_compiled"])
    s = fastdyn.stats()
    assert 7 <= s["recompiles"] <= 8, f"the default bound is 8 recompiles: {s}"
    assert s["frames_compiled"] == s["recompiles"] + 1, s
    assert compiled[-3:] == [0, 0, 0], f"past the bound the frame must run eagerly: {compiled}"
    out, d = call_with_stats(f, inputs[0].clone())
    assert_same(out, bounded(inputs[0]))
    assert d["cache_hits"] == 1, f"entries compiled before the bound must still hit: {d}"
    out, d = call_with_stats(f, inputs[-1].clone())
    assert_same(out, bounded(inputs[-1]))
    assert d["frames_compiled"] == 0, d


class Plain:
    def __init__(self, v):
        self.v = v


def store_on(obj, v):
    obj.v = v  # no tensor: a side effect only, guarded on the identity of a fresh object


def test_recompile_bound_warns_once_only_for_code_with_graphs():
    # Under enable(), library code often meets the bound on fresh objects; a warning would be
    # noise. Code that compiled tensor graphs warns once, naming itself and the guard that failed.
    limit = fastdyn._C.recompile_limit()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = fastdyn.jit(store_on)
        for i in range(limit + 2):
            f(Plain(0), i)
        g = fastdyn.jit(bounded)
        for rank in range(1, limit + 4):
            g(torch.randn(*([2] * rank)))
    texts = [str(w.message) for w in caught if "recompile limit" in str(w.message)]
    assert len(texts) == 1, texts
    assert "bounded reached the recompile limit" in texts[0] and "L['x']" in texts[0], texts[0]
    assert "set_recompile_limit" in texts[0], texts[0]


def test_recompile_bound_is_per_code_object_and_reset_lifts_it():
    f = fastdyn.jit(bounded)
    for rank in range(1, 13):
        f(torch.randn(*([2] * rank)))
    out, d = call_with_stats(fastdyn.jit(plain), torch.randn(3))
    assert d["frames_compiled"] == 1, f"another function must not inherit the bound: {d}"
    fastdyn.reset()
    x = torch.randn(*([2] * 12))
    out, d = call_with_stats(f, x)
    assert d["frames_compiled"] == 1, f"reset() must lift the bound: {d}"
    assert_same(out, bounded(x))


def FreshPerCall(scale):  # a C-type object: guarded by identity, so a new one misses every entry
    import types
    return types.SimpleNamespace(scale=scale)


def scaled_by_box(box, x):
    return x * box.scale + 1


def test_entries_that_never_hit_again_are_checked_less_at_the_bound():
    # transformers' causal LMs make a DynamicCache per forward call: every compiled entry of the
    # frames that receive it misses on the next call. Past the bound, checking all of them on
    # every call cost more than the frame (0.81x eager on OPT): after `limit` misses in a row at
    # the bound, spans of calls run eagerly without checking (limit, then doubling up to 64);
    # the entries stay, and the calls between spans check them.
    f = fastdyn.jit(scaled_by_box)
    x = torch.randn(4)
    limit = fastdyn._C.recompile_limit()
    deltas = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3 * limit + 1):
            box = FreshPerCall(2.0)
            out, d = call_with_stats(f, box, x)
            assert_same(out, scaled_by_box(box, x))
            deltas.append(d)
    assert sum(d["frames_compiled"] for d in deltas) == limit, deltas
    assert all(d["frames_compiled"] == 0 and d["cache_misses"] == 1 for d in deltas[limit:2 * limit]), deltas
    assert all(d["frames_seen"] == 0 for d in deltas[2 * limit:3 * limit]), f"a span checks nothing: {deltas}"
    assert deltas[3 * limit]["frames_seen"] == 1, f"after the span, the entries are checked again: {deltas}"
    fastdyn.reset()
    out, d = call_with_stats(f, FreshPerCall(3.0), x)
    assert d["frames_compiled"] == 1, f"reset() forgets it: {d}"
    assert_same(out, x * 3.0 + 1)


def test_entries_stay_in_use_past_the_limit():
    # Shapes it compiled keep running compiled after the limit was reached (they ran eagerly for
    # good before); a new shape runs eagerly.
    f = fastdyn.jit(bounded)
    limit = fastdyn._C.recompile_limit()
    inputs = [torch.randn(*([2] * rank)) for rank in range(1, limit + 1)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for x in inputs:
            f(x)
        for rank in range(limit + 1, 2 * limit + 3):  # more misses in a row than the limit
            assert_same(f(torch.ones(*([2] * rank))), bounded(torch.ones(*([2] * rank))))
    for x in inputs[:2]:
        for _ in range(64):  # past any span of unchecked calls
            out, d = call_with_stats(f, x)
            if d["cache_hits"]:
                break
        assert d["cache_hits"] == 1, d
        assert_same(out, bounded(x))


def test_recompile_limit_is_a_public_setting():
    old = fastdyn.recompile_limit()
    try:
        fastdyn.set_recompile_limit(2)
        assert fastdyn.recompile_limit() == 2
        f = fastdyn.jit(bounded)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for rank in range(1, 5):
                f(torch.randn(*([2] * rank)))
        assert fastdyn._C.cache_size(bounded) == 2
        assert any("recompile limit (2 entries)" in str(w.message) for w in caught), [str(w.message) for w in caught]
        for bad in (0, -1, 1.5, True, "3"):
            with pytest.raises(ValueError):
                fastdyn.set_recompile_limit(bad)
    finally:
        fastdyn.set_recompile_limit(old)


def test_a_hit_at_the_bound_keeps_the_entries():
    f = fastdyn.jit(bounded)
    limit = fastdyn._C.recompile_limit()
    inputs = [torch.randn(*([2] * rank)) for rank in range(1, limit + 1)]
    for x in inputs:
        f(x)  # `limit` entries
    for _ in range(3):  # misses at the bound, each followed by a hit: never `limit` in a row
        for rank in range(limit + 1, 2 * limit):
            assert_same(f(torch.ones(*([2] * rank))), bounded(torch.ones(*([2] * rank))))
        out, d = call_with_stats(f, inputs[0])
        assert d["cache_hits"] == 1, d
        assert_same(out, bounded(inputs[0]))


# --------------------------------------------------------------------------- skip

@fastdyn.skip if fastdyn else (lambda fn: fn)
def skipped_straight(x):
    return x * 5


@fastdyn.skip if fastdyn else (lambda fn: fn)
def skipped_caller(x):
    return plain(x) + 1


def test_skip_never_compiles_the_function():
    f = fastdyn.jit(skipped_straight)
    x = torch.randn(3)
    for _ in range(2):
        out, d = call_with_stats(f, x)
        assert_same(out, x * 5)
        assert d["frames_compiled"] == 0 and d["cache_hits"] == 0, d


def test_explain_of_a_skipped_function_reports_no_graph():
    report = fastdyn.explain(skipped_straight, torch.randn(3))
    assert report.graph_count == 0, f"explain says fastdyn would compile a skipped function:\n{report}"


def test_skip_still_compiles_what_it_calls():
    x = torch.randn(3)
    fastdyn.enable()
    try:
        s0 = fastdyn.stats()
        out = skipped_caller(x)
        s1 = fastdyn.stats()
    finally:
        fastdyn.disable()
    d = stats_delta(s0, s1)
    assert_same(out, plain(x) + 1)
    assert d["frames_compiled"] == 1, f"plain() under a skipped caller must compile: {d}"


def test_skip_returns_a_callable_with_the_same_behaviour():
    assert skipped_straight.__name__ == "skipped_straight"
    assert_same(skipped_straight(torch.ones(2)), torch.full((2,), 5.0))


# --------------------------------------------------------------------------- frames without tensors

def no_tensors(a, b):
    return a * b + 1


def no_tensors_with_calls(a, b):
    return a * b + len(str(a))


def test_functions_without_tensors_are_not_compiled():
    f = fastdyn.jit(no_tensors)
    for _ in range(2):
        out, d = call_with_stats(f, 6, 7)
        assert out == 43
        assert d["frames_compiled"] == 0 and d["graphs"] == 0, d
        assert d["graph_breaks"] == 0, f"code without tensors is not a graph break: {d}"
    report = fastdyn.explain(no_tensors, 6, 7)
    assert report.graph_count == 0 and report.graph_break_count == 0, str(report)


def test_functions_without_tensors_with_python_calls_run_untouched():
    f = fastdyn.jit(no_tensors_with_calls)
    for _ in range(2):
        out, d = call_with_stats(f, 6, 7)
        assert out == 43
        assert d["frames_compiled"] == 0 and d["graphs"] == 0, d


def test_functions_without_tensors_under_enable():
    fastdyn.enable()
    try:
        s0 = fastdyn.stats()
        out = no_tensors(2, 3)
        out2 = no_tensors_with_calls(2, 3)
        s1 = fastdyn.stats()
    finally:
        fastdyn.disable()
    d = stats_delta(s0, s1)
    assert (out, out2) == (7, 7)
    assert d["frames_compiled"] == 0 and d["graphs"] == 0, d


# --------------------------------------------------------------------------- graph breaks, fullgraph

def breaks_on_print(x):
    y = x + 1
    print("side effect")  # BREAK
    return y * 2


def breaks_on_tensor_branch(x):
    y = x * 2
    if y.sum() > 0:  # BREAK
        return y
    return -y


def inlines_python_call(x):
    y = x * 2
    return plain(y)


def unrolls_loop(x):
    y = x
    for _ in range(3):
        y = y + 1
    return y


def breaks_on_missing_op(x):
    y = x + 1
    return torch.kthvalue(y, 2, dim=-1)  # BREAK


def breaks_on_item(x):
    y = x.sum()
    return x * y.item()  # BREAK


BREAKERS = [breaks_on_print, breaks_on_tensor_branch, breaks_on_missing_op, breaks_on_item]


@pytest.mark.parametrize("fn", [inlines_python_call, unrolls_loop], ids=lambda fn: fn.__name__)
def test_python_calls_and_static_loops_are_captured_whole(fn):
    x = torch.randn(2, 3)
    assert_same(fastdyn.jit(fn)(x), fn(x))
    report = fastdyn.explain(fn, x)
    assert (report.graph_count, report.graph_break_count) == (1, 0), str(report)


@pytest.mark.parametrize("fn", BREAKERS, ids=lambda fn: fn.__name__)
def test_fullgraph_raises_graph_break_error_naming_the_line(fn, capsys):
    f = fastdyn.jit(fn, fullgraph=True)
    for _ in range(2):  # the error must not be cached away
        with pytest.raises(fastdyn.GraphBreakError) as info:
            f(torch.randn(2, 3))
        err = info.value
        assert isinstance(err.reason, str) and err.reason, "GraphBreakError.reason is empty"
        assert os.path.samefile(err.filename, __file__), err.filename
        assert err.lineno == line_of(fn, "# BREAK"), (err.lineno, err.reason)
    assert "side effect" not in capsys.readouterr().out, "fullgraph raised after running the print"


def test_graph_break_error_is_an_exception_with_a_message():
    assert issubclass(fastdyn.GraphBreakError, Exception)
    f = fastdyn.jit(fullgraph=True)(breaks_on_missing_op)
    with pytest.raises(fastdyn.GraphBreakError) as info:
        f(torch.randn(2, 3))
    assert "kthvalue" in info.value.reason, f"the reason must name the missing op: {info.value.reason}"
    assert "kthvalue" in str(info.value)


@pytest.mark.parametrize("fn", BREAKERS, ids=lambda fn: fn.__name__)
def test_graph_break_continues_in_a_resume_function(fn, capsys):
    x = torch.randn(2, 3)
    expected = fn(x)
    f = fastdyn.jit(fn)
    for _ in range(2):
        out, d = call_with_stats(f, x)
        assert_same(out, expected)
    report = fastdyn.explain(fn, x)
    assert report.graph_count >= 1, str(report)  # the ops before the break are a graph
    assert report.graph_break_count == 1, str(report)
    first = report.break_reasons[0]
    assert first.reason, str(report)
    assert os.path.samefile(first.filename, __file__), first.filename
    assert first.lineno == line_of(fn, "# BREAK"), str(report)
    assert fastdyn.stats()["graph_breaks"] >= 1, fastdyn.stats()


def test_fullgraph_raises_even_after_a_non_fullgraph_run(capsys):
    x = torch.randn(2, 3)
    fastdyn.jit(breaks_on_print)(x)  # runs eagerly, and may remember that
    with pytest.raises(fastdyn.GraphBreakError) as info:
        fastdyn.jit(breaks_on_print, fullgraph=True)(x)
    assert info.value.lineno == line_of(breaks_on_print, "# BREAK")


def breaks_under_enable(x):
    y = x + 1
    print("side effect")  # BREAK
    return y


def test_enable_with_fullgraph_raises():
    fastdyn.enable(fullgraph=True)
    try:
        try:
            breaks_under_enable(torch.randn(2))
        except fastdyn.GraphBreakError as e:
            raised = e
        else:
            raised = None
    finally:
        fastdyn.disable()
    assert raised is not None, "enable(fullgraph=True) did not raise GraphBreakError"
    assert raised.lineno == line_of(breaks_under_enable, "# BREAK")


# --------------------------------------------------------------------------- FASTDYN_LOG

LOG_SCRIPT = textwrap.dedent('''
    import torch
    import fastdyn

    @fastdyn.jit
    def fd_log_pointwise(x):
        return torch.relu(x * 2 + 1)

    def fd_log_breaker(x):
        y = x + 1
        print("hello from the breaker")  # BREAK
        return y

    @fastdyn.jit
    def fd_log_bounded(x):
        return x - 1

    fd_log_pointwise(torch.randn(3, 5))
    fd_log_pointwise(torch.randn(3, 5))
    fd_log_pointwise(torch.randn(4, 5, dtype=torch.float64))
    fastdyn.jit(fd_log_breaker)(torch.randn(2))
    for rank in range(1, 13):
        fd_log_bounded(torch.ones([2] * rank))
    print("done")
''')


def run_logged(tmp_path, log):
    script = tmp_path / "log_script.py"
    script.write_text(LOG_SCRIPT)
    env = dict(os.environ)
    env.pop("FASTDYN_LOG", None)
    if log is not None:
        env["FASTDYN_LOG"] = log
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(fastdyn.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([package_root, env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "hello from the breaker\ndone\n", "logs must go to stderr, not stdout"
    break_line = 1 + LOG_SCRIPT.splitlines().index(
        next(ln for ln in LOG_SCRIPT.splitlines() if "# BREAK" in ln))
    return proc.stderr, break_line


def test_log_all_categories(tmp_path):
    err, break_line = run_logged(tmp_path, "graph_breaks,recompiles,guards,graphs,code")
    lines = err.splitlines()
    assert any("log_script.py" in ln and re.search(rf"\b{break_line}\b", ln) for ln in lines), (
        f"graph_breaks: no line names log_script.py:{break_line}\n{err}")
    assert any("fd_log_pointwise" in ln and re.search("recompil", ln, re.I) for ln in lines), (
        f"recompiles: no recompile line for fd_log_pointwise\n{err}")
    assert any("fd_log_pointwise" in ln and re.search(r"dtype|Double|float64", ln) for ln in lines), (
        f"recompiles: nothing says that the dtype guard of fd_log_pointwise failed\n{err}")
    assert any("fd_log_bounded" in ln and re.search("limit|bound|eager", ln, re.I) for ln in lines), (
        f"recompiles: nothing says why fd_log_bounded runs eagerly\n{err}")
    assert re.search(r"float32|\bFloat\b", err) and re.search(r"3,\s*5", err), (
        f"guards: no dtype/size guard of the (3, 5) float32 input\n{err}")
    assert "relu" in err, f"graphs: the graph of fd_log_pointwise (relu) was not printed\n{err}"
    assert "RETURN_VALUE" in err or "RETURN_CONST" in err, f"code: no disassembly\n{err}"


def without_limit_warning(err):
    """stderr less the recompile-limit UserWarning (given unasked, once), and its source line."""
    lines, out, skip = err.splitlines(), [], False
    for ln in lines:
        if "UserWarning: fastdyn:" in ln and "recompile limit" in ln:
            skip = True
            continue
        if skip and ln.startswith("  "):
            skip = False
            continue
        skip = False
        out.append(ln)
    return "\n".join(out)


def test_log_is_selective(tmp_path):
    err, _ = run_logged(tmp_path, "graphs")
    err = without_limit_warning(err)
    assert "relu" in err, err
    assert "RETURN_VALUE" not in err and "LOAD_FAST" not in err, f"code dumps without 'code'\n{err}"
    assert not any("fd_log_pointwise" in ln and re.search("recompil", ln, re.I)
                   for ln in err.splitlines()), f"recompile events without 'recompiles'\n{err}"
    assert "log_script.py" not in err, f"graph breaks without 'graph_breaks'\n{err}"


def test_no_log_without_the_variable(tmp_path):
    err, _ = run_logged(tmp_path, None)
    # Hitting the recompile bound warns unconditionally; nothing else may be printed.
    assert "fd_log_bounded reached the recompile limit" in err, err
    other = [ln for ln in without_limit_warning(err).splitlines() if ln.strip()]
    assert other == [], f"fastdyn wrote to stderr without FASTDYN_LOG:\n{err}"


def _tensor_free_loop(n):
    total = 0
    for i in range(n):
        total += (i * 7) % 13
    return total


def _tensor_op_after_long_python_loop(x, n):
    y = x * 2  # a tensor op first: the trace may then unroll a long loop
    for i in range(n):
        y = y + 0 if i % 1000 else y + 1
    return y


def test_tensor_free_frames_give_up_early_and_run_eagerly():
    # 4000 iterations unroll into ~40k instructions; a tensor-free trace stops at 20k.
    report = fastdyn.explain(_tensor_free_loop, 4000)
    assert report.graph_count == 0
    assert any("no tensor operation in the first" in b.reason for b in report.break_reasons), str(report)
    fastdyn.reset()
    assert fastdyn.jit(_tensor_free_loop)(4000) == _tensor_free_loop(4000)
    # A trace that records a tensor op first may run past that budget.
    x = torch.randn(4)
    report = fastdyn.explain(_tensor_op_after_long_python_loop, x, 3000)
    assert report.graph_count == 1 and report.graph_break_count == 0, str(report)
    out = fastdyn.jit(_tensor_op_after_long_python_loop)(x, 3000)
    torch.testing.assert_close(out, _tensor_op_after_long_python_loop(x, 3000))


def test_torch_compile_called_under_enable_works_and_the_hook_survives():
    # Dynamo installs its evaluator over fastdyn's for the compiled call and hands us the frames
    # it leaves. Those must run as written: Dynamo once traced fastdyn's rewritten code (a
    # function in co_consts) and raised. Afterwards fastdyn's hook must see frames again.
    import torch._dynamo

    @torch.compile(backend="eager")
    def compiled(x):
        return torch.sin(x) + 1

    x = torch.randn(4)
    torch._dynamo.reset()
    fastdyn.enable()
    try:
        _, before = call_with_stats(plain, x)
        assert_same(compiled(x), torch.sin(x) + 1)
        assert_same(compiled(x), torch.sin(x) + 1)
        out, after = call_with_stats(other_plain, x)
    finally:
        fastdyn.disable()
        torch._dynamo.reset()
    assert before["frames_seen"] == 1, before
    assert after["frames_seen"] == 1 and after["frames_compiled"] == 1, after
    assert_same(out, other_plain(x))


class _AddScaled(torch.Tensor):
    """A tensor subclass whose own __torch_function__ changes what add returns."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        return out * 10 if func is torch.Tensor.add else out


class _Marked(torch.Tensor):
    """A plain tensor subclass: torch.Tensor's __torch_function__ makes results _Marked too."""


@pytest.mark.parametrize("cls", [_AddScaled, _Marked])
def test_tensor_subclasses_with_torch_function_keep_their_semantics(cls):
    def f(x):
        return x.add(1)
    x = torch.ones(2).as_subclass(cls)
    want = f(x)
    g = fastdyn.jit(f)
    for _ in range(2):
        got = g(x)
        assert type(got) is type(want) and torch.equal(got.as_subclass(torch.Tensor), want.as_subclass(torch.Tensor))


def test_a_torch_function_mode_sees_every_op():
    from torch.overrides import TorchFunctionMode

    class AddTen(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            return out + 10 if func in (torch.Tensor.add, torch.Tensor.__add__) else out

    def f(x):
        return x + 1
    g, x = fastdyn.jit(f), torch.ones(2)
    g(x)  # compiled without the mode
    with AddTen():
        want = f(torch.ones(2))
        assert torch.equal(g(x), want) and torch.equal(g(x), want)  # [12, 12]
    assert torch.equal(g(x), f(x))  # and the compiled entry after it


def test_a_max_result_live_across_a_graph_break(capsys):
    # torch.return_types.max is a struct sequence: rebuilt from one tuple of its fields.
    def f(x):
        m = x.max(-1)
        print("break")
        return m.values, m.indices
    x = torch.tensor([[1., 3.], [2., 0.]])
    want = f(x)
    got = fastdyn.jit(f)(x)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
