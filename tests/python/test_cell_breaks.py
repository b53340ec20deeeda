"""Graph breaks in frames with cell variables (issue 21): a local that a nested function or, in
3.11, a comprehension reads is a cell; such a frame used to run wholly eagerly at a break. Now the
transformed code hands the continuation real cells holding the trace's values (the continuation
reads them as free variables), and a store to a free variable is replayed into its cell after the
graph. What must hold: results, closures made after the break seeing the
cell, a nested function's nonlocal store, a cell holding a graph output, cell arguments, returned closures,
both successors of a conditional break, and a closure live at a break handed to the continuation.
"""
import torch

from fdcheck import call_with_stats, check, check_fresh, fastdyn


def r(*shape):
    return torch.randn(*shape)


def test_a_break_in_a_frame_whose_locals_a_comprehension_reads():
    def f(x, w):
        scale = 2.0
        ys = [x * w * scale for _ in range(2)]  # w, scale: cells (3.11)
        print("", end="")  # a graph break: the continuation reads scale and w from its cells
        return sum(ys) + [y * scale + w for y in ys][0] + x

    check(f, r(4), r(4), graphs=2, breaks=1)


def test_a_store_to_a_cell_after_the_break_is_replayed_into_the_cell():
    def f(x):
        k = 2.0
        first = x * (lambda: k)()  # k: a cell in 3.11 and 3.12 (3.12 inlines comprehensions)
        print("", end="")
        k = 3.0  # STORE_DEREF in the continuation: its free variable, set after its graph
        return first + x * (lambda: k)()

    check(f, r(4), graphs=2, breaks=1)


def test_a_value_read_from_a_cell_keeps_its_value_after_the_cell_is_stored():
    def f(x, y):
        n = x.shape[0]
        t = y + float(int(y.argmax())) / 3  # a break: the continuation reads n as a free variable
        pairs = [(i, n) for i in range(2)]  # n read from the cell ...
        n -= 2  # ... then the cell stored (replayed after the graph): pairs keeps the old n
        return t, pairs  # (difftest seed 21021 returned [(0, 2), (1, 2)])

    check(f, r(4, 4), r(4, 4), graphs=2, breaks=1)


def test_a_free_variable_stored_by_a_compiled_closure_is_seen_by_its_caller():
    def outer(x):
        total = x * 0

        def add(v):
            nonlocal total  # inlined in outer's continuation: its store to outer's cell is traced
            total = total + v
            return total * 1

        print("", end="")
        add(x)
        add(x * 2)
        return total

    check_fresh(outer, lambda: (r(3),), graphs=2, breaks=1)


def test_a_cell_argument_and_a_cell_holding_a_graph_output():
    def f(x, n):
        total = (x * n).sum()
        print("", end="")
        return [x * n + total for _ in range(1)][0], [x + n for _ in range(1)]

    check(f, r(3), 4, graphs=2, breaks=1)


def test_a_closure_made_in_the_frame_is_returned_with_its_cells():
    def make(x, k):
        w = x * k

        def apply(y, scale=2.0):
            return y * w * scale

        return apply, w

    fn, w = fastdyn.jit(make)(torch.ones(3), 3.0)
    eager_fn, eager_w = make(torch.ones(3), 3.0)
    torch.testing.assert_close(w, eager_w)
    torch.testing.assert_close(fn(torch.ones(3)), eager_fn(torch.ones(3)))
    assert fn.__closure__[0].cell_contents is w and fn.__defaults__ == (2.0,)
    assert fastdyn.explain(make, torch.ones(3), 3.0).graph_count == 1


def test_a_nested_functions_nonlocal_store_to_the_frames_cell_is_traced():
    def outer(x):
        total = x * 0

        def add(v):
            nonlocal total
            total = total + v  # STORE_DEREF on outer's cell, inlined
            return total

        a = add(x)
        b = add(x * 2)
        return a, b, total

    check_fresh(outer, lambda: (r(3),), graphs=1, breaks=0)


def test_a_conditional_break_on_a_tensor_in_a_frame_with_cells():
    def f(x):
        k = 3.0
        scaled = [x * k for _ in range(1)][0]
        if scaled.sum() > 0:  # a break with two successors
            return [scaled + k for _ in range(1)][0]
        return [scaled - k for _ in range(1)][0]

    for sign in (1.0, -1.0):
        x = torch.full((4,), sign)
        out, delta = call_with_stats(fastdyn.jit(f), x)
        torch.testing.assert_close(out, f(x))
    report = fastdyn.explain(f, torch.ones(4))
    assert report.graph_break_count == 1 and "no graph break" not in str(report), report


def test_a_closure_live_at_a_break_is_handed_to_the_continuation():
    # Rebuilt at every call with the same cells; the continuation guards it by its code, defaults
    # and globals (not its identity, which changes at every call) and its cells through
    # __closure__: no recompile on the second call (check_fresh checks).
    def f(x):
        seen = []

        def log(v):
            seen.append(v)

        print("", end="")  # a break before any op: not counted, the continuation gets `log`
        log(x + 1)
        log(x * 2)
        return seen

    check_fresh(f, lambda: (r(2),), graphs=1, breaks=0)


def test_a_function_without_cells_live_at_a_break_runs_the_frame_as_written():
    def f(x):
        def double(v):
            return v * 2

        print("", end="")
        return double(x)

    check_fresh(f, lambda: (r(2),), graphs=1, breaks=1)  # (the graph: double's own frame, called as written)
    assert "a function without cells made in the frame is live at the break" in str(fastdyn.explain(f, r(2)))


def test_del_of_a_cell_variable_after_a_break():
    def f(x):
        out = x * 2
        keep = [lambda: out]  # out: a cell
        print("", end="")
        y = out + 1
        del out  # DELETE_DEREF in the continuation: the cell empties after its graph
        try:
            keep[0]()
        except NameError as e:
            return y, "unbound: " + str(e)
        return y, "bound"

    # (The lambda's own frame, reading the emptied cell, breaks twice more: it raises NameError.)
    check(f, r(4), graphs=2, breaks=4)
