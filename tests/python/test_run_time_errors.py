"""A graph that raises at run time (an index out of range, a write eager refuses): the exception,
its line and what the frame did before it are eager's. The frame is redone eagerly where the
failed run left nothing behind (eval_hook/compiler.cpp redo_after_failure, runtime/graph_calls.h),
a write eager refuses breaks the trace before it (capture.cpp refused_write), and an op inside a
`try` whose handler may catch a run-time error keeps its frame as written where the graph cannot
be redone (symbolic/exceptions.cpp)."""
import pytest
import torch

from fdcheck import fastdyn


CALLS = 0


class _Counter:
    def __init__(self):
        self.n = 0


def _write_then_index(x, idx, counter):
    global CALLS
    CALLS += 1
    counter.n += 1
    return x[idx] * 2


def _write_then_index_then_break(x, idx, counter):
    counter.n += 1
    y = x[idx] * 2
    print(end="")
    return y + 1


@pytest.mark.parametrize("fn", [_write_then_index, _write_then_index_then_break])
def test_a_graph_that_raises_after_the_frame_wrote_state_leaves_eagers_writes(fn):
    """The graph runs before the writes the trace recorded are replayed: when it raises (an index
    out of range), the frame is redone eagerly, so the global and the attribute get eager's
    writes and the exception is eager's."""
    global CALLS
    x = torch.randn(4)
    results = {}
    for mode, f in (("eager", fn), ("fastdyn", fastdyn.jit(fn))):
        CALLS, counter, seen = 0, _Counter(), []
        for i in (1, 2, 10, 3):
            try:
                seen.append(f(x, torch.tensor([i]), counter))
            except IndexError as e:
                seen.append(type(e).__name__)
        results[mode] = (seen, CALLS, counter.n)
    (want, want_calls, want_n), (got, got_calls, got_n) = results["eager"], results["fastdyn"]
    assert (got_calls, got_n) == (want_calls, want_n)
    for g, w in zip(got, want):
        assert g == w if isinstance(w, str) else torch.equal(g, w)


def _write_input_then_index(x, idx, counter):
    x.mul_(2)
    counter.n += 1
    return x[idx] * 2


def _write_input_then_index_then_break(x, idx, counter):
    x.add_(1)
    counter.n += 1
    y = x[idx] * 2
    print(end="")
    return y + 1


def _index_then_write_input(x, idx, counter):
    counter.n += 1
    y = x[idx] * 2
    x.mul_(2)
    return y


NEEDS_LLVM = pytest.mark.skipif(fastdyn is None or not fastdyn._C.has_llvm_cpu, reason="a compiled program (llvm_cpu)")


# A compiled program writes the input last whatever the order of the lines; the aten backend runs
# the ops in order, so only a failure before its first write leaves the input untouched.
@pytest.mark.parametrize("fn, backend", [
    pytest.param(_write_input_then_index, "native", marks=NEEDS_LLVM),
    pytest.param(_write_input_then_index_then_break, "native", marks=NEEDS_LLVM),
    (_index_then_write_input, "native"), (_index_then_write_input, "aten")])
def test_a_graph_that_writes_an_input_and_raises_before_its_writes_is_redone(fn, backend):
    """A graph that writes into an input cannot be redone once it wrote; a compiled program writes
    the mutated inputs last, so one that raised (an index out of range) before them left nothing
    behind, and the frame is redone eagerly: the attribute written before the failing line is
    eager's, and so are the input's values and the exception's line. (Replaying the recorded ops
    on ATen wrote the input but lost the attribute write, which the trace replays after the graph.)
    The aten backend's op-by-op run likewise, when it failed before its first write into an input."""
    import traceback
    results = {}
    for mode, f in (("eager", fn), ("fastdyn", fastdyn.jit(fn, backend=backend))):
        x, counter, seen = torch.ones(4), _Counter(), []
        for i in (1, 2, 10, 3):
            try:
                seen.append(f(x, torch.tensor([i]), counter).tolist())
            except IndexError as e:
                seen.append(("IndexError", traceback.extract_tb(e.__traceback__)[-1].lineno))
        results[mode] = (seen, counter.n, x.tolist())
    assert results["fastdyn"] == results["eager"]


def _in_place_on_a_leaf_that_requires_grad(x, w, log):
    y = x * w
    log.append(1)
    w.add_(1)  # eager raises here: a leaf that requires grad, written in grad mode
    return y


def _in_place_on_a_view_of_such_a_leaf(x, w, log):
    y = x * w
    log.append(1)
    w[0] = 2.0  # eager raises here too: a view of that leaf
    return y


@pytest.mark.parametrize("fn", [_in_place_on_a_leaf_that_requires_grad, _in_place_on_a_view_of_such_a_leaf])
def test_an_in_place_write_into_a_leaf_that_requires_grad_raises_on_its_line_after_what_came_before(fn):
    """Difftest seed 35655: the write ran in the graph (on ATen, with autograd), whose error named
    the graph's line and came before the trace's replayed effects (the list append). Capture now
    refuses it as eager does, so the trace breaks before it and it raises eagerly."""
    import traceback

    def run(f):
        x, w, log = torch.randn(3), torch.randn(3, requires_grad=True), []
        try:
            f(x, w, log)
        except RuntimeError as e:
            return str(e), traceback.extract_tb(e.__traceback__)[-1].lineno, log
        return None
    want = run(fn)
    assert want is not None and "requires grad" in want[0]
    assert run(fastdyn.jit(fn)) == want


def _write_into_a_view_of_a_view_after_a_break(x, log):
    a = x.unsqueeze(0).squeeze(0)
    b = a.transpose(0, 1)
    log.append(int((b >= (a * a).sum()).sum()))  # breaks: the continuation gets x, a and b
    b.sub_(a)  # eager raises here: partial overlap, seen through b -> a -> x
    log.append(2)


def test_three_inputs_in_one_storage_refuse_the_overlapping_write_on_its_line():
    """Difftest seed 29273: b's storage was recorded as a's and a's as x's, so b and a looked like
    two storages, the write was recorded, and the graph raised on the continuation's last line."""
    import traceback

    def run(mode):
        x, log = torch.randn(4, 4), []
        if mode:
            fastdyn.enable()
        try:
            _write_into_a_view_of_a_view_after_a_break(x, log)
        except RuntimeError as e:
            return traceback.extract_tb(e.__traceback__)[-1].lineno, str(e)[:40], len(log)
        finally:
            fastdyn.disable()
    eager = run(False)
    assert eager[1].startswith("unsupported operation")
    assert run(True) == eager and run(True) == eager


def _index_in_try_after_an_intermediate_write(x, e, idx):
    y = x * 2
    y.add_(1)  # writes a value the graph made: the graph can still be redone
    try:
        z = torch.nn.functional.embedding(idx, e)
    except IndexError:
        z = y.sum()
    return z + 1


def _index_in_try_after_an_input_write(x, e, idx):
    x.add_(1)  # writes an input: the graph cannot be redone, so the frame runs as written
    try:
        z = torch.nn.functional.embedding(idx, e)
    except IndexError:
        z = x.sum()
    return z + 1


@pytest.mark.parametrize("fn", [_index_in_try_after_an_intermediate_write, _index_in_try_after_an_input_write])
def test_an_op_failing_at_run_time_inside_try_reaches_the_except_clause(fn):
    """The graph runs first: an index out of range inside `try` raised from the graph call, past
    the except clause that eager runs."""
    e = torch.randn(3, 4)
    for idx in (torch.tensor([1]), torch.tensor([7]), torch.tensor([7])):
        x = torch.randn(4)
        want_x = x.clone()
        want = fn(want_x, e, idx)
        got = fastdyn.jit(fn)(x, e, idx)
        assert torch.equal(got, want) and torch.equal(x, want_x)


def _input_write_in_try_except_not_implemented(cache, k, pos):
    try:
        cache.index_copy_(0, pos, k)  # transformers' static cache: the fallback is for MPS
    except NotImplementedError:
        cache[pos] = k
    return cache * 2


def _input_write_in_try_finally(x, log):
    try:
        x.add_(1)
    finally:
        log.append(1)
    return x * 2


def _input_write_in_try_except_index_error(x, log):
    try:
        x.add_(1)
    except IndexError:
        log.append(1)
    return x * 2


@pytest.mark.parametrize("fn, args, graphs", [
    (_input_write_in_try_except_not_implemented, lambda: (torch.zeros(4, 3), torch.ones(1, 3), torch.tensor([2])), 1),
    (_input_write_in_try_finally, lambda: (torch.zeros(3), []), 1),
    (_input_write_in_try_except_index_error, lambda: (torch.zeros(3), []), 0),
])
def test_which_except_clauses_keep_a_graph_that_writes_an_input(fn, args, graphs):
    """Only a clause that can catch what an op raises at run time (IndexError, RuntimeError,
    ValueError, TypeError, or a RuntimeError subclass other than NotImplementedError) makes the
    frame run as written; a finally clause or `except NotImplementedError` keeps the graph."""
    want_args, got_args = args(), args()
    want = fn(*want_args)
    fastdyn.reset()
    got = fastdyn.jit(fn)(*got_args)
    assert torch.equal(got, want) and torch.equal(got_args[0], want_args[0])
    assert fastdyn.stats()["graphs"] == graphs
