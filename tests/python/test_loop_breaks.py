"""A graph break inside a loop or a try block (issue 21). Inside a while loop (and no try block) the
continuation resumes in the loop body, and its trace runs on into the next iteration up to the
same break: one graph per iteration, the continuations handed on through a trampoline. Otherwise
the frame breaks before the outermost loop or try block instead of running as written: the graph
covers the code up to it; the continuation runs the loop and what follows as written, its calls
compiled as frames of their own. The loop's own iterator on the stack there
is rebuilt only where its items were fixed when it was made (a tuple, range, module list, a
tensor's rows) and nothing but the loop reaches it: iter() of a tuple of the items still to come.
One over a list, dict or set, or one the code holds, stays eager's: the frame runs as written."""
import pytest
import torch
import torch.nn as nn

from fdcheck import assert_same, fastdyn

pytestmark = pytest.mark.skipif(fastdyn is None, reason="fastdyn not importable")

LOG = []


def untraceable(tag):
    """A call the trace cannot follow (it breaks on print), with a side effect to order."""
    print(end="")
    LOG.append(tag)


def run_both(fn, *args):
    """fn eagerly, then through fastdyn twice: the results and the side-effect logs must agree.
    Returns the graph-break reasons fastdyn.explain gives."""
    LOG.clear()
    want = fn(*args)
    want_log = list(LOG)
    jitted = fastdyn.jit(fn)
    for call in ("first", "second"):
        LOG.clear()
        got = jitted(*args)
        assert_same(got, want, f"{fn.__name__}: {call} call")
        assert LOG == want_log, f"{fn.__name__}: {call} call: side effects {LOG} != {want_log}"
    return str(fastdyn.explain(fn, *args))


class Block(nn.Module):
    def __init__(self, i):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.i = i

    def forward(self, x):
        y = self.lin(x)
        untraceable(self.i)
        return torch.relu(y) + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(8, 8)
        self.blocks = nn.ModuleList([Block(i) for i in range(3)])
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        x = torch.tanh(self.stem(x)) * 2
        for blk in self.blocks:
            x = blk(x)
        return self.head(x).softmax(-1)


def test_a_break_inside_a_module_loop_compiles_the_code_before_the_loop():
    torch.manual_seed(0)
    net = Net().eval()

    def forward(x):
        return net(x)

    with torch.no_grad():
        report = run_both(forward, torch.randn(4, 8))
    assert "the frame breaks before it" in str(report), report
    # The stem is a graph of Net.forward's: tanh and mul fused after the linear.
    with torch.no_grad():
        text = str(fastdyn.explain(forward, torch.randn(4, 8)))
    assert "aten::tanh" in text and "aten::mul.Scalar" in text, text


def test_a_while_loop_with_a_break_keeps_the_order_of_effects():
    def f(x, n):
        x = x * 2 + 1
        i = 0
        while i < n:
            x = x + i
            untraceable(("step", i))
            i += 1
        return x.sum(), i

    report = run_both(f, torch.ones(3), 4)
    assert "the continuation resumes in its body" in str(report), report
    # The counter makes an entry per iteration: the loop's continuation keeps 3, and warns of no
    # recompile limit (the rest of a longer loop runs as written).
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_both(f, torch.ones(3), 12)


@pytest.mark.parametrize("kind", ["tuple", "range", "enumerate", "zip", "reversed", "tensor rows"])
def test_the_loop_iterator_is_rebuilt_over_fixed_items(kind):
    def f(x):
        x = x.cos()
        ws = (x * 1, x * 2, x * 3)
        total = x
        if kind == "tuple":
            for w in ws:
                total = total + w
                untraceable(kind)
        elif kind == "range":
            for i in range(3):
                total = total + ws[i] * i
                untraceable(i)
        elif kind == "enumerate":
            for i, w in enumerate(ws, 1):
                total = total + w * i
                untraceable(i)
        elif kind == "zip":
            for a, b in zip(ws, reversed(ws)):
                total = total + a * b
                untraceable(kind)
        elif kind == "reversed":
            for w in reversed(ws):
                total = total * 0.5 + w
                untraceable(kind)
        else:
            for row in torch.stack(ws):
                total = total + row.sin()
                untraceable(kind)
        return total

    report = run_both(f, torch.randn(5))
    assert "the frame breaks before it" in str(report), report


def test_a_loop_over_a_list_the_loop_extends_sees_the_new_items():
    # An iterator over a list is not rebuilt (eager's sees the list change): the frame runs as
    # written, and the items the loop appends are visited, as in eager.
    def f(x):
        items = [x + 1, x + 2]
        out = x * 0
        for v in items:
            out = out + v
            untraceable(len(items))
            if len(items) < 4:
                items.append(v * 10)
        return out, len(items)

    run_both(f, torch.ones(2))


def test_an_iterator_the_code_holds_is_not_rebuilt():
    # Its type, copy or pickle would tell a rebuilt one from eager's: the frame runs as written.
    def outside_loops(x):
        it = iter((x + 1, x + 2, x + 3))
        first = next(it)
        untraceable("mid")
        return first, list(it), type(it).__name__

    def loop_over_a_local(x):
        x = x.exp()
        it = iter((x, x * 2))
        for w in it:
            x = x + w
            untraceable("w")
        return x, type(it).__name__

    for f in (outside_loops, loop_over_a_local):
        report = run_both(f, torch.zeros(3))
        assert "can reach" in report or "no graph break" in report, report


def test_a_nested_loop_breaks_before_the_outer_loop():
    def f(x):
        x = x.exp()
        for i in range(2):
            for j in range(2):
                x = x + i * j
                untraceable((i, j))
        return x

    report = run_both(f, torch.zeros(2))
    assert "the frame breaks before it" in str(report), report


def test_a_loop_that_begins_the_frame_runs_as_written():
    def f(x):
        for i in range(3):
            x = x + i
            untraceable(i)
        return x

    report = run_both(f, torch.zeros(2))
    assert "nothing to compile before it" in str(report), report


# ---- try blocks: the frame breaks before the outermost try block around the break


def with_try(x, d):
    x = x.exp() * 2
    try:
        y = x + d["k"]
        untraceable("in try")
        z = y * 3
    except KeyError:
        untraceable("handler")
        z = x - 1
    finally:
        LOG.append("finally")
    return z.sum()


@pytest.mark.parametrize("d", [{"k": 1.0}, {}], ids=["body", "handler"])
def test_a_break_inside_a_try_block_breaks_before_it(d):
    report = run_both(with_try, torch.zeros(3), d)
    assert "the frame breaks before it" in report, report


def test_an_exception_leaving_the_try_block_is_eagers():
    def f(x, n):
        x = x + 1
        try:
            untraceable("before")
            if n > 1:
                raise ValueError(f"n is {n}")
        finally:
            LOG.append("finally")
        return x

    run_both(f, torch.zeros(2), 1)
    LOG.clear()
    with pytest.raises(ValueError, match="n is 2") as want:
        f(torch.zeros(2), 2)
    want_log = list(LOG)
    LOG.clear()
    with pytest.raises(ValueError, match="n is 2") as got:
        fastdyn.jit(f)(torch.zeros(2), 2)
    assert LOG == want_log
    assert got.traceback[-1].lineno == want.traceback[-1].lineno  # raised on the same source line


def test_a_try_block_inside_a_loop_inside_a_try_block():
    def f(x, items):
        x = x.sin()
        total = x * 0
        try:
            for i in range(len(items)):
                try:
                    total = total + items[i]
                    untraceable(i)
                except IndexError:
                    untraceable("never")
        finally:
            LOG.append("outer finally")
        return total + x

    report = run_both(f, torch.ones(2), (torch.ones(2), torch.full((2,), 2.0)))
    assert "the frame breaks before it" in report, report


# ---- while loops: the continuation resumes in the loop body (one graph per iteration, the
# continuations handed on through a trampoline rather than nested calls)


class StopWhenDone:
    """A stop check like transformers' StopCheck: bool() of a tensor, a break inside the call."""

    def __call__(self, x, length):  # (length unread, as in transformers: read, it would be guarded)
        return bool(x[:, -1].max() <= 0)


def decode_like(x, stop):
    x = x * 1.0
    done = False
    while not done:
        nxt = x[:, -1:] - 1
        x = torch.cat([x, nxt], 1)
        done = stop(x, x.shape[1])  # a size-derived int crosses the break as an argument
    return x


def test_a_while_loop_resumes_in_its_body_with_one_entry_for_every_length():
    report = run_both(decode_like, torch.full((1, 3), 6.0), StopWhenDone())
    assert "the continuation resumes in its body" in report, report
    jitted = fastdyn.jit(decode_like)
    jitted(torch.full((1, 3), 6.0), StopWhenDone())
    jitted(torch.full((1, 2), 7.0), StopWhenDone())  # a second width: the entry's dim becomes a symbol
    before = fastdyn.stats()
    for width, start in ((4, 9.0), (5, 12.0)):  # more iterations, longer rows: the entries serve them all
        got = jitted(torch.full((1, width), start), StopWhenDone())
        want = decode_like(torch.full((1, width), start), StopWhenDone())
        assert_same(got, want, "longer decode")
    delta = {k: fastdyn.stats()[k] - before[k] for k in ("recompiles", "graphs")}
    assert delta == {"recompiles": 0, "graphs": 0}, delta


def test_a_loop_that_breaks_at_every_iteration_does_not_nest_calls():
    def f(x, n):
        x = x + 1
        i = torch.zeros(())
        while (i < n).item():  # a tensor condition: a break at every iteration
            x = x * 0.5 + 1
            i = i + 1
        return x, i

    n = 3000  # nested continuations would pass the recursion limit
    want = f(torch.zeros(3), n)
    got = fastdyn.jit(f)(torch.zeros(3), n)
    assert_same(got, want, "3000 iterations")


def decode_with_a_late_local(x, stop):
    x = x * 1.0
    done = False
    first = True
    while not done:
        if first:
            nxt = x[:, -1:] - 1
        else:
            prev = x[:, -1:]  # unbound at the break of the first iteration, bound at the others
            nxt = prev - 1
        first = False
        x = torch.cat([x, nxt], 1)
        done = stop(nxt, x.shape[1])  # (of one size: the stop check's frame does not recompile)
    return x


def test_the_continuations_of_one_resume_point_share_their_size_history():
    # transformers' decode loop: `model_inputs` is unbound at the first iteration's break and
    # bound at the others, so two continuations resume there (one deletes the local). The first
    # runs at length 4, the second from length 5 on: their traces remember sizes together, so the
    # second's first trace makes the length a symbol at once. Each kept its own history before:
    # the second traced static at 5 and again dynamic at 6 (one more trace and kernel set per
    # generate(): GPT-2's 45 kernel compiles became 37).
    report = run_both(decode_with_a_late_local, torch.full((1, 3), 6.0), StopWhenDone())
    assert "the continuation resumes in its body" in report, report
    fastdyn.reset()
    jitted = fastdyn.jit(decode_with_a_late_local)
    got = jitted(torch.full((1, 3), 6.0), StopWhenDone())
    assert_same(got, decode_with_a_late_local(torch.full((1, 3), 6.0), StopWhenDone()), "decode")
    assert fastdyn.stats()["recompiles"] == 0, fastdyn.stats()
    # reset() forgets the shared history too: the second continuation traces static again first
    fastdyn.reset()
    jitted(torch.full((1, 3), 6.0), StopWhenDone())
    assert fastdyn.stats()["recompiles"] == 0, fastdyn.stats()


def test_a_number_crossing_a_break_is_guarded_where_its_value_is_read():
    # A continuation reads the locals it receives where it uses them: isinstance() of a number
    # reads its type only (a type guard: a new value at every call hits the entry), arithmetic
    # reads its value (a value guard: a new value is a new entry, never the old result).
    def type_first(x, values):
        y = x + 1
        v = next(values)  # a C call the trace does not follow: the graph breaks here
        return isinstance(v, float), y * v

    def value_first(x, values):
        y = x + 1
        v = next(values)
        return y * v, isinstance(v, float)

    def value_unread(x, values):
        y = x + 1
        v = next(values)
        return isinstance(v, float), y * 2

    x = torch.ones(3)
    for fn, recompiles in ((type_first, 2), (value_first, 2), (value_unread, 0)):
        fastdyn.reset()
        jitted = fastdyn.jit(fn)
        values = iter([1.5, 2.5, 3.5])  # one iterator for every call (its identity is guarded)
        for v in (1.5, 2.5, 3.5):
            assert_same(jitted(x, values), fn(x, iter([v])), f"{fn.__name__} at {v}")
        assert fastdyn.stats()["recompiles"] == recompiles, (fn.__name__, fastdyn.stats())
