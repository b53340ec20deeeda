"""Lists and dicts the caller passed, mutated by a compiled frame (symbolic/containers.cpp
Tracer::mutate_visible): the trace mutates their symbolic items and the transformed code gives
the real objects their final contents after the graph. The cases that must not go wrong: the same
object reached through two paths (before and after the mutation), aliasing that changes between
calls, a break after the mutation, a mutation inside a call that breaks (replayed once, not
twice), the identity of the container and of the items it keeps.
"""
import torch

from fdcheck import call_with_stats, check, check_fresh, fastdyn


def r(*shape):
    return torch.randn(*shape)


def test_append_replayed_and_the_list_returned_is_the_callers():
    def f(acc, x):
        acc.append(x * 2)
        return acc

    acc = [r(3)]
    first = acc[0]
    x = r(3)
    out, delta = call_with_stats(fastdyn.jit(f), acc, x)
    assert delta["graphs"] == 1 and delta["graph_breaks"] == 0, delta
    assert out is acc and acc[0] is first and len(acc) == 2
    torch.testing.assert_close(acc[1], x * 2)


def test_two_arguments_that_become_one_list_recompile():
    def f(a, b, x):
        a.append(x + 1)
        return len(b), x * 2

    jf = fastdyn.jit(f)
    x = r(4)
    a, b = [], []
    (n, _), delta = call_with_stats(jf, a, b, x)
    assert n == 0 and len(a) == 1 and b == []
    assert delta["graphs"] == 1 and delta["graph_breaks"] == 0, delta
    # Now one list for both: eager sees the append through b.
    c = []
    (n, _), delta = call_with_stats(jf, c, c, x)
    assert n == 1 and len(c) == 1
    assert delta["recompiles"] == 1, delta
    # And distinct again: the first entry still serves.
    a, b = [], [1]
    assert jf(a, b, x)[0] == 1 and len(a) == 1 and b == [1]


def test_one_list_through_two_paths_read_before_the_mutation_is_left_to_python():
    def f(d, x):
        d["a"].append(x)
        return len(d["b"])

    shared = []
    d = {"a": shared, "b": shared}
    assert fastdyn.jit(f)(d, r(2)) == 1  # eager: 1 (the same list)
    assert len(shared) == 1


def test_read_through_a_second_path_after_the_mutation_sees_it():
    class Holder:
        pass

    def f(h, lst, x):
        lst.append(x)
        return len(h.items), h.items[-1] * 2

    lst = [r(2)]
    h = Holder()
    h.items = lst
    x = r(2)
    (n, last), delta = call_with_stats(fastdyn.jit(f), h, lst, x)
    assert delta["graphs"] == 1 and delta["graph_breaks"] == 0, delta
    assert n == 2
    torch.testing.assert_close(last, x * 2)
    # A Holder whose list is another one: eager reads the other list.
    other = [r(2), r(2), r(2)]
    h2 = Holder()
    h2.items = other
    lst2 = [r(2)]
    n, last = fastdyn.jit(f)(h2, lst2, x)
    assert n == 3 and len(lst2) == 2
    torch.testing.assert_close(last, other[-1] * 2)


def test_a_break_after_the_mutation_keeps_one_append():
    def f(acc, x):
        acc.append(x + 1)
        print("", end="")  # a graph break
        acc.append(x + 2)
        return x.sum()

    acc = []
    x = r(3)
    fastdyn.jit(f)(acc, x)
    assert len(acc) == 2
    torch.testing.assert_close(acc[0], x + 1)
    torch.testing.assert_close(acc[1], x + 2)


def test_a_mutation_inside_a_call_that_breaks_happens_once():
    def helper(acc, x):
        acc.append(x * 3)
        print("", end="")  # breaks inside the inlined call: the call runs as written
        return x

    def f(acc, x):
        y = helper(acc, x)
        return y + 1

    acc = []
    fastdyn.jit(f)(acc, r(2))
    assert len(acc) == 1


def test_global_list_mutated():
    def f(x):
        LOG.append(x.sum())
        return x * 2

    LOG.clear()
    jf = fastdyn.jit(f)
    _, delta = call_with_stats(jf, r(3))
    assert delta["graphs"] == 1 and delta["graph_breaks"] == 0, delta
    jf(r(3))
    assert len(LOG) == 2


LOG = []


def test_an_exception_after_the_mutation_leaves_eagers_state():
    def f(acc, x):
        acc.append(x)
        if x.shape[0] > 2:
            raise ValueError("too long")
        return x

    acc = []
    try:
        fastdyn.jit(f)(acc, r(3))
    except ValueError:
        pass
    assert len(acc) == 1


def test_dict_order_after_pop_and_reinsert():
    def f(d, x):
        a = d.pop("a")
        d["a"] = a + x
        d.setdefault("z", 0)
        return x

    def make():
        return ({"a": torch.ones(2), "b": 1}, torch.ones(2))

    _, args = check_fresh(f, make)
    assert list(args[0]) == ["b", "a", "z"]


def test_mutated_list_hits_the_cache_on_the_next_call():
    def f(acc, x):
        acc.append(x * 2)
        return x + 1

    jf = fastdyn.jit(f)
    acc = []
    jf(acc, r(3))
    _, delta = call_with_stats(jf, [], r(3))
    assert delta["cache_hits"] == 1 and delta["graphs"] == 0


def test_a_dict_mutated_while_iterating_it_raises_as_eager():
    # CPython's test_dict: dropping d[2] runs X.__del__, which clears d; the next step of the
    # iteration raises. Replayed after the graph, neither would happen.
    class X(int):
        def __del__(self):
            d.clear()

    d = {i: X(i) for i in range(8)}

    def iter_and_mutate(x):
        for k, v in d.items():
            if k == 2:
                d[2] = None
        return x + 1

    try:
        fastdyn.jit(iter_and_mutate)(r(2))
        raised = False
    except RuntimeError:
        raised = True
    assert raised


def test_a_list_appended_while_iterating_it_sees_the_new_items():
    def f(lst, x):
        total = x * 0
        for v in lst:
            total = total + v
            if len(lst) < 4:
                lst.append(v * 2)
        return total

    want_lst = [torch.ones(2), torch.ones(2) * 3]
    want = f(want_lst, torch.ones(2))
    got_lst = [torch.ones(2), torch.ones(2) * 3]
    got = fastdyn.jit(f)(got_lst, torch.ones(2))
    torch.testing.assert_close(got, want)
    assert len(got_lst) == len(want_lst) == 4


def test_dropping_an_item_with_a_finalizer_happens_where_eager_drops_it():
    events = []

    class Noisy:
        def __del__(self):
            events.append("del")

    def f(lst, x):
        lst[0] = None
        events.append("after store")
        return x + 1

    lst = [Noisy()]
    fastdyn.jit(f)(lst, r(2))
    assert events == ["del", "after store"], events


def test_a_list_made_in_the_frame_appended_while_iterating_it():
    # The trace iterates a snapshot: without the check the loop stopped after the first item
    # (a wrong result: 2 items where eager makes 3).
    def f(x):
        lst = [x]
        for v in lst:
            if len(lst) < 3:
                lst.append(v * 2)
        return len(lst), lst[-1]

    n, last = fastdyn.jit(f)(torch.ones(2))
    assert n == 3
    torch.testing.assert_close(last, torch.ones(2) * 4)


def test_a_list_appended_after_the_loop_over_it_stays_one_graph():
    def f(x):
        lst = [x, x + 1]
        total = x * 0
        for v in lst:
            total = total + v
        lst.append(total)
        return lst

    _, delta = call_with_stats(fastdyn.jit(f), torch.ones(2))
    assert delta["graphs"] == 1 and delta["graph_breaks"] == 0, delta


# --------------------------------------------------------------------------- sets made in the frame


def test_a_set_made_in_the_frame_is_a_new_set_at_every_call():
    # A set display used to be a real set made once at trace time: every call returned that one
    # object, so a caller's add() showed up in the next call's result.
    def f(x):
        s = {1, 2}
        return x + 1, s

    jf = fastdyn.jit(f)
    first = jf(r(2))[1]
    first.add(99)
    second = jf(r(2))[1]
    assert second == {1, 2} and second is not first


def test_set_operations_follow_eager_including_iteration_order():
    def f(x):
        seen = set()
        for name in ("q_proj", "k_proj", "v_proj", "q_proj"):
            seen.add(name)
        seen.discard("k_proj")
        seen |= {"o_proj"}
        extra = {n.upper() for n in seen}  # a set comprehension
        both = seen | {"gate"}
        order = [n for n in both]
        return x * len(both), sorted(extra), order, "q_proj" in seen, both - seen, seen

    check_fresh(f, lambda: (r(3),), graphs=1, breaks=0)


def test_removing_a_missing_item_raises_keyerror_as_eager():
    def f(x):
        s = set([1])
        s.remove(2)
        return x

    check(f, r(2), graphs=0)


def test_a_set_changed_while_iterated_raises_as_eager():
    def f(x):
        s = {1, 2, 3}
        for i in s:
            s.add(i + 10)
        return x

    check(f, r(2), graphs=0)


def test_dict_of_a_dict_and_keywords_replaces_a_repeated_key():
    # dict(a, x=5) where a has 'x', and pairs repeating a key: one entry, the last value, in the
    # first one's place (before 2026-11-27 the trace appended a second 'x': len 3, d['x'] == 1).
    def f(x):
        a = {"x": 1, "y": 2}
        d = dict(a, x=5)
        e = dict([("k", 1), ("j", 3), ("k", 2)])
        return x + d["x"], list(d.items()), len(d), list(e.items()), len(e)

    check(f, torch.zeros(2))


def _rewrites_contents(fn):
    """Whether fn's transformed code gives a dict the caller passed new contents (dict.clear)."""
    code = fastdyn._C.transformed_code(fn)
    return dict.clear in code.co_consts


def test_a_dict_given_back_what_it_held_is_not_rewritten():
    # torch.optim's SGD stores each momentum buffer back into its state dict: the contents do not
    # change, and the transformed code leaves the dict alone (symbolic/continuation.cpp
    # contents_unchanged), where it rewrote every parameter's state at every step.
    def f(state, x):
        buf = state["buf"]
        buf.mul_(0.9).add_(x)
        state["buf"] = buf
        old = state["n"]
        state["n"] = 7
        state["n"] = old
        return x + 1

    jf = fastdyn.jit(f)
    state = {"buf": torch.ones(3), "n": 5}
    buf = state["buf"]
    jf(state, torch.ones(3))
    assert state == {"buf": buf, "n": 5} and state["buf"] is buf and list(state) == ["buf", "n"]
    torch.testing.assert_close(buf, torch.full((3,), 1.9))
    assert not _rewrites_contents(f)


def test_a_dict_given_other_objects_or_order_is_rewritten():
    def swap(d, x):
        d["a"], d["b"] = d["b"], d["a"]
        return x + 1

    def reorder(d, x):
        d["a"] = d.pop("a")
        return x + 1

    for fn, expect in ((swap, ["a", "b"]), (reorder, ["b", "a"])):
        a, b = torch.zeros(1), torch.ones(1)
        d = {"a": a, "b": b}
        fastdyn.jit(fn)(d, torch.ones(1))
        assert list(d) == expect, fn.__name__
        if fn is swap:
            assert d["a"] is b and d["b"] is a
        assert _rewrites_contents(fn), fn.__name__
