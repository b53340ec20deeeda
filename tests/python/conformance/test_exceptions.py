"""Exceptions raised by user code come out of fastdyn exactly as from eager: the same type, the
same message (and __cause__), inputs mutated exactly as eager left them, and a traceback that
holds the user's frames, the last one with the right function name and line number. With and
without graph breaks (an exception raised in a continuation), in inlined callees, from torch ops.
Counts are Dynamo's (its explain re-raises the user's exception, so they were measured with a
counting backend)."""
import traceback

import pytest
import torch

from fdcheck import assert_same, check, check_report, clone_tree, fastdyn, line_of

from .cases import r



class ShapeError(ValueError):
    def __init__(self, message, shape):
        super().__init__(message)
        self.shape = shape


def _call(fn, *args):
    # Eager and fastdyn calls go through this one line, so the test's own frames match too.
    return fn(*args)


def _raise_of(fn, *args):
    try:
        _call(fn, *args)
    except Exception as error:  # noqa: BLE001
        return error
    raise AssertionError(f"{fn.__name__} did not raise")


def user_frames(error):
    return [(f.name, f.lineno) for f in traceback.extract_tb(error.__traceback__)
            if f.filename == __file__]


def check_raises_like_eager(fn, *args, marker=None, graphs=None, breaks=None):
    """fastdyn raises eager's exception (type, message, cause), leaves the inputs as eager left
    them, and its traceback holds eager's user frames in order, ending on the same frame (and, with
    `marker`, on the marked line of fn). Twice: the compile call and the cached call."""
    eager_args = clone_tree(args)
    expected = _raise_of(fn, *eager_args)
    want_frames = user_frames(expected)
    if marker:
        assert want_frames[-1] == (fn.__name__, line_of(fn, marker)), want_frames
    jitted = fastdyn.jit(fn)
    for call in ("compile call", "cached call"):
        run_args = clone_tree(args)
        got = _raise_of(jitted, *run_args)
        assert type(got) is type(expected) and str(got) == str(expected), (
            f"{call}: raised {type(got).__name__}({got}) where eager raised "
            f"{type(expected).__name__}({expected})")
        assert type(got.__cause__) is type(expected.__cause__), (call, got.__cause__)
        assert_same(run_args, eager_args, f"{call}: inputs after the exception")
        frames = user_frames(got)
        assert frames and frames[-1] == want_frames[-1], (
            f"{call}: last user frame {frames[-1:]} != eager {want_frames[-1]}\n"
            + "".join(traceback.format_tb(got.__traceback__)))
        it = iter(frames)
        assert all(f in it for f in want_frames), (
            f"{call}: user frames {frames} do not contain eager's {want_frames} in order")
    if graphs is not None:
        check_report(fn, fastdyn.explain(fn, *clone_tree(args)), graphs, breaks)
    return expected


# --------------------------------------------------------------------------- without breaks

def raise_value_error_after_ops(x):
    y = x * 2
    raise ValueError(f"bad value {y.shape[0]}")  # RAISE


def raise_custom_exception_with_attributes(x):
    if x.dim() != 3:
        raise ShapeError("expected 3 dims", tuple(x.shape))  # RAISE
    return x


def assertion_fails_with_message(x):
    y = x + 1
    assert y.shape[1] == 5, f"width {y.shape[1]}"  # RAISE
    return y


def key_error_from_dict(x):
    d = {"a": x + 1}
    return d["b"]  # RAISE


def index_error_from_list(x):
    items = [x, x * 2]
    return items[5]  # RAISE


def attribute_error_from_object(x):
    y = x.exp()
    return y.no_such_attribute  # RAISE


def torch_op_shape_mismatch(x):
    y = x + 1
    return y @ y  # RAISE


def raise_from_cause(x):
    try:
        {}["missing"]
    except KeyError as e:
        raise RuntimeError("wrapped") from e  # RAISE


def inplace_then_raise(x):
    x.add_(1)
    raise ValueError("after mutating the input")  # RAISE


def test_value_error_after_ops():
    check_raises_like_eager(raise_value_error_after_ops, r(4, 8), marker="RAISE")


def test_custom_exception_attributes_preserved():
    err = check_raises_like_eager(raise_custom_exception_with_attributes, r(4, 8), marker="RAISE")
    got = _raise_of(fastdyn.jit(raise_custom_exception_with_attributes), r(4, 8))
    assert got.shape == err.shape == (4, 8)


def test_assertion_error_message():
    check_raises_like_eager(assertion_fails_with_message, r(4, 8), marker="RAISE")


def test_key_error_from_dict_lookup():
    check_raises_like_eager(key_error_from_dict, r(4, 8), marker="RAISE")


def test_index_error_from_list():
    check_raises_like_eager(index_error_from_list, r(4, 8), marker="RAISE")


def test_attribute_error_from_tensor():
    check_raises_like_eager(attribute_error_from_object, r(4, 8), marker="RAISE")


def test_torch_op_error_message_and_line():
    check_raises_like_eager(torch_op_shape_mismatch, r(4, 8), marker="RAISE")


def argmax_of_bool(x):
    m = x > 0
    return m.argmax(dim=1) + 1  # RAISE


def addcmul_of_bools(x):
    m = x > 0
    return torch.addcmul(m, m, m) | m  # RAISE


def floor_division_of_bools(x):
    m = x > 0
    return torch.div(m, m, rounding_mode="floor") * 2  # RAISE


# The dtype rules of ops.def (checked against ATen by GoogleTest DtypeColumn): a dtype ATen's
# kernel refuses is refused at capture too, so eager's error is raised where eager raises it
# (these three were recorded and computed by a kernel before the rules were checked).
@pytest.mark.parametrize("fn", [argmax_of_bool, addcmul_of_bools, floor_division_of_bools],
                         ids=lambda f: f.__name__)
def test_dtype_an_op_refuses_raises_eagers_error(fn):
    check_raises_like_eager(fn, r(4, 8), marker="RAISE")


def test_raise_from_keeps_cause():
    check_raises_like_eager(raise_from_cause, r(4, 8), marker="RAISE")


def test_inplace_before_raise_applied_once():
    check_raises_like_eager(inplace_then_raise, r(4, 8), marker="RAISE")


# --------------------------------------------------------------------------- in inlined callees

def validate(t):
    if t.shape[-1] % 3:
        raise ValueError(f"last dim {t.shape[-1]} not divisible by 3")  # CALLEE-RAISE
    return t


def calls_validating_helper(x):
    y = x.relu()
    return validate(y) * 2  # CALL


def wrong_arguments_to_helper(x):
    return validate(x, x)  # CALL


def test_exception_in_inlined_callee_has_both_frames():
    err = check_raises_like_eager(calls_validating_helper, r(4, 8))
    frames = user_frames(_raise_of(fastdyn.jit(calls_validating_helper), r(4, 8)))
    assert ("calls_validating_helper", line_of(calls_validating_helper, "CALL")) in frames
    assert frames[-1] == ("validate", line_of(validate, "CALLEE-RAISE")), frames
    assert "divisible" in str(err)


def test_type_error_calling_helper_with_wrong_arguments():
    check_raises_like_eager(wrong_arguments_to_helper, r(4, 8), marker="CALL")


# --------------------------------------------------------------------------- after a break

def raise_after_print_break(x):
    y = x + 1
    print("before the error")
    z = y * 2
    raise ValueError(f"after the break {z.shape}")  # RAISE


def raise_after_item_break(x):
    s = x.sum().item()
    y = x * 2
    if y.dim() == 2:
        raise RuntimeError("checked after .item()")  # RAISE
    return y * s


def torch_error_in_continuation(x):
    y = x + 1
    print("break first")
    return y.view(7, -1)  # RAISE


def raise_in_callee_after_its_break(x):
    y = x - 1
    return noisy_validate(y)  # CALL


def noisy_validate(t):
    print("validating")
    raise ShapeError("rejected after a print", tuple(t.shape))  # CALLEE-RAISE


def raise_in_no_grad_after_break(x):
    with torch.no_grad():
        y = x * 2
        print("no grad break")
        raise KeyError(f"grad enabled: {torch.is_grad_enabled()}, {y.requires_grad}")  # RAISE


def test_exception_after_break_same_type_message_line():
    check_raises_like_eager(raise_after_print_break, r(4, 8), marker="RAISE")


def test_exception_after_item_break():
    check_raises_like_eager(raise_after_item_break, r(4, 8), marker="RAISE")


def test_torch_error_in_continuation_points_at_user_line():
    check_raises_like_eager(torch_error_in_continuation, r(4, 8), marker="RAISE")


def test_exception_in_callee_after_its_break():
    check_raises_like_eager(raise_in_callee_after_its_break, r(4, 8))
    frames = user_frames(_raise_of(fastdyn.jit(raise_in_callee_after_its_break), r(4, 8)))
    assert frames[-1] == ("noisy_validate", line_of(noisy_validate, "CALLEE-RAISE")), frames
    assert ("raise_in_callee_after_its_break",
            line_of(raise_in_callee_after_its_break, "CALL")) in frames, frames


def test_exception_in_no_grad_after_break_sees_grad_disabled():
    err = check_raises_like_eager(raise_in_no_grad_after_break, r(4, 8).requires_grad_(),
                                  marker="RAISE")
    assert "grad enabled: False, False" in str(err)
    assert torch.is_grad_enabled()


def test_exception_after_break_graph_and_break_counts():
    # Dynamo (counted with a counting backend; its explain re-raises): the graph before the print,
    # and no graph for the continuation, which raises unconditionally (Dynamo meets the raise while
    # tracing and runs that frame eagerly): 1 graph, 1 break.
    check_raises_like_eager(raise_after_print_break, r(4, 8), graphs=1, breaks=1)


def test_frame_that_always_raises_counts():
    # Dynamo: a frame that raises unconditionally is run eagerly: 0 graphs, 0 breaks.
    check_raises_like_eager(raise_value_error_after_ops, r(4, 8), graphs=0, breaks=0)


def test_a_frame_that_raised_for_one_input_compiles_for_the_next():
    # Input validation that raises for some calls only: the raising call runs as written (no
    # graph break, no entry), and the frame is traced again at the next call, which compiles.
    def validated(x):
        if x.dim() != 2:
            raise ValueError(f"expected 2 dims, got {x.dim()}")
        return x * 2 + 1
    jitted = fastdyn.jit(validated)
    before = fastdyn.stats()
    with pytest.raises(ValueError, match="expected 2 dims, got 3"):
        jitted(r(2, 3, 4))
    x = r(4, 8)
    assert_same(jitted(x), validated(x))
    after = fastdyn.stats()
    assert after["graph_breaks"] == before["graph_breaks"]
    assert after["graphs"] - before["graphs"] == 1 and after["frames_compiled"] - before["frames_compiled"] == 1
    with pytest.raises(ValueError, match="expected 2 dims, got 1"):   # the compiled entry's guards send it back
        jitted(r(8))


# --------------------------------------------------------------------------- caught inside the frame

def caught_key_error_in_frame(x):
    d = {"a": x}
    try:
        y = d["b"]
    except KeyError:
        y = x * 2
    return y + 1


def caught_exception_from_callee(x):
    try:
        return validate(x)
    except ValueError as e:
        return x * len(str(e))


def test_exception_caught_inside_frame():
    check(caught_key_error_in_frame, r(4, 8), graphs=1)


def test_exception_from_callee_caught_in_caller():
    check(caught_exception_from_callee, r(4, 8), graphs=1)


# `except E as e` traced through: the handler reads the trace's exception object; whatever would
# hand that object (or its missing traceback and context) to run time is not traced, and the
# frame is eager's.
def named_and_returned(x):
    try:
        validate(x)
    except ValueError as e:
        return x + 1, e


def named_and_kept_past_the_handler(x):
    kept = None
    try:
        validate(x)
    except ValueError as e:
        kept = e
    return x * len(kept.args), kept


def named_traceback_read(x):
    try:
        validate(x)
    except ValueError as e:
        return x * (e.__traceback__ is not None) + len(e.args[0])


def named_then_noted(x, store):
    try:
        validate(x)
    except ValueError as e:
        e.add_note("seen")
        store.append(e)
    return x - 1


def named_and_raised_again(x):
    try:
        validate(x)
    except ValueError as e:
        y = x * len(str(e))
        raise e
    return y


def test_a_named_exception_read_in_its_handler_is_traced_through():
    x = r(4, 8)
    assert_same(fastdyn.jit(named_traceback_read)(x), named_traceback_read(x))  # run as written
    assert_same(fastdyn.jit(caught_exception_from_callee)(x), caught_exception_from_callee(x))


@pytest.mark.parametrize("fn", [named_and_returned, named_and_kept_past_the_handler])
def test_a_named_exception_that_leaves_the_trace_is_eagers_own_at_every_call(fn):
    x = r(4, 8)
    jitted = fastdyn.jit(fn)
    got = [jitted(x) for _ in range(3)]
    want = fn(x)
    for out, e in got:
        assert_same(out, want[0])
        assert type(e) is ValueError and str(e) == str(want[1]) and e.__traceback__ is not None
    assert len({id(e) for _, e in got}) == 3


def test_a_named_exception_noted_and_kept_is_eagers_own():
    store, want_store, x = [], [], r(4, 8)
    want = named_then_noted(x, want_store)
    jitted = fastdyn.jit(named_then_noted)
    for _ in range(2):
        assert_same(jitted(x, store), want)
    assert [e.__notes__ for e in store] == [["seen"], ["seen"]] and store[0] is not store[1]
    assert all(e.__traceback__ is not None for e in store)


def test_a_named_exception_raised_again_is_eagers():
    check_raises_like_eager(named_and_raised_again, r(4, 8))


# try/except traced through (no graph break): what the handler sees, what it does not catch, and
# the side effects made before the raise.
def caught_without_a_name(x):
    d = {"a": x}
    y = x.sin()
    try:
        y = d["missing"]
    except KeyError:
        y = y * 2
    return y + 1


def caught_and_kept(x, store):
    try:
        validate(x)
    except ValueError as e:  # the exception object itself: eager's, a new one each call
        store.append(e)
    return x + 1


def caught_by_a_tuple_of_classes(x):
    try:
        y = validate(x)
    except (TypeError, ValueError):
        y = x.neg()
    return y * 2


def not_caught_by_its_except(x):
    d = {"a": x}
    y = x + 1
    try:
        y = d["missing"]  # RAISE
    except ValueError:
        y = y * 3
    return y


def reraised_in_its_except(x, log):
    d = {}
    try:
        return d["k"]  # RAISE (a bare raise keeps the exception's own traceback)
    except KeyError:
        log.append("handled")
        raise


def finally_runs_once_then_propagates(x, log):
    y = x * 2
    try:
        log.append(y.shape[0])
        raise ValueError("from the try")  # RAISE
    finally:
        log.append("finally")


def effects_before_the_raise_kept(x, log):
    try:
        log.append("before")
        y = x.relu()
        raise ValueError("caught")
    except ValueError:
        log.append("after")
    return y + 1


@pytest.mark.parametrize("fn", [caught_without_a_name, caught_by_a_tuple_of_classes])
def test_try_except_traced_through(fn):
    check(fn, r(4, 8), graphs=1)


def test_an_except_that_does_not_match_lets_eager_raise():
    check_raises_like_eager(not_caught_by_its_except, r(4, 8), marker="RAISE", breaks=0)


def test_reraise_and_finally_propagate_with_their_side_effects():
    for fn in (reraised_in_its_except, finally_runs_once_then_propagates):
        want_log, got_log = [], []
        want = _raise_of(fn, r(4, 8), want_log)
        got = _raise_of(fastdyn.jit(fn), r(4, 8), got_log)
        assert type(got) is type(want) and str(got) == str(want)
        assert got_log == want_log, (fn.__name__, got_log, want_log)
        assert user_frames(got) == user_frames(want) and user_frames(got)[-1] == (fn.__name__, line_of(fn, "RAISE"))


def test_a_caught_exception_object_is_eagers_own_at_every_call():
    store, x = [], r(4, 8)
    jitted = fastdyn.jit(caught_and_kept)
    for _ in range(2):
        assert_same(jitted(x, store), x + 1)
    assert len(store) == 2 and store[0] is not store[1]
    assert all(isinstance(e, ValueError) and e.__traceback__ is not None for e in store)
    assert str(store[0]) == "last dim 8 not divisible by 3"


def test_side_effects_before_a_caught_raise_happen_once():
    want_log, got_log = [], []
    x = r(4, 8)
    want = effects_before_the_raise_kept(x, want_log)
    jitted = fastdyn.jit(effects_before_the_raise_kept)
    assert_same(jitted(x, got_log), want)
    assert got_log == want_log == ["before", "after"]
    report = fastdyn.explain(effects_before_the_raise_kept, x, [])
    assert report.graph_count == 1 and report.graph_break_count == 0, report


def test_error_does_not_poison_the_cache():
    def f(x, fail):
        y = x * 2
        if fail:
            raise ValueError("asked to fail")
        return y + 1
    jitted = fastdyn.jit(f)
    x = r(4, 8)
    for fail in (True, False, True, False):
        if fail:
            with pytest.raises(ValueError, match="asked to fail"):
                jitted(x, fail)
        else:
            assert_same(jitted(x, fail), f(x, fail))
