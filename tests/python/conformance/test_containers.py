"""Containers created or read in the frame: lists, tuples, dicts, sets, namedtuples and dataclass
instances, with mutation (append, update, item assignment). Mutations of containers the caller can
see (arguments) are replayed after the graph: the `fresh=True` cases rebuild the arguments for
each run and compare them after the call (fdcheck.check_fresh). Each function is ONE graph."""
import collections
import dataclasses
import typing

import torch

from fdcheck import assert_same, fastdyn

from .cases import Cases, r

CASES = Cases()
Point = collections.namedtuple("Point", ["x", "y"])


class Pair(typing.NamedTuple):
    first: torch.Tensor
    second: torch.Tensor
    weight: float = 1.0

    def blended(self, t):
        return self.first * (1 - t) + self.second * t

    @property
    def total(self):
        return (self.first + self.second) * self.weight


@dataclasses.dataclass
class State:
    hidden: torch.Tensor
    count: int = 0
    tags: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class Options:
    scale: float
    shift: float = 0.0

    def apply(self, x):
        return x * self.scale + self.shift


@dataclasses.dataclass
class Tracked:
    value: torch.Tensor
    history: list = dataclasses.field(default_factory=list)
    norm: float = dataclasses.field(init=False, default=0.0)

    def __post_init__(self):
        self.history.append("made")
        self.norm = 2.0


def two():
    return r(4, 8), r(4, 8)


# --------------------------------------------------------------------------- lists

@CASES(two)
def list_built_and_indexed(x, y):
    items = [x, y, x * y]
    return items[0] + items[-1] - items[1]


@CASES(two)
def list_append_in_frame(x, y):
    out = []
    out.append(x)
    out.append(y * 2)
    return torch.stack(out)


@CASES(two)
def list_extend_insert_pop(x, y):
    items = [x]
    items.extend([y, y + 1])
    items.insert(0, x * 3)
    last = items.pop()
    first = items.pop(0)
    return first + last + len(items)


@CASES(two)
def list_item_and_slice_assignment(x, y):
    items = [x, x, x, x]
    items[1] = y
    items[2:] = [y * 2]
    del items[0]
    return items


@CASES(two)
def list_concat_repeat_and_slices(x, y):
    items = [x] * 2 + [y]
    return items[1:], items[::-1][0] * 2, len(items)


@CASES(two)
def list_and_tuple_constructors(x, y):
    t = tuple([x, y])
    lst = list(t)
    lst.reverse()
    return lst[0] - t[0]


@CASES(lambda: (r(4, 8),))
def nested_lists(x):
    grid = [[x, x + 1], [x + 2]]
    grid[1].append(x + 3)
    return [len(row) for row in grid], grid[1][1]


@CASES(lambda: ([r(4, 8), r(4, 8), r(4, 8)],))
def builtin_sum_over_list(xs):
    return sum(xs), sum(xs[1:], xs[0])


@CASES(lambda: (r(4, 8),))
def sorted_min_max_on_constant_lists(x):
    sizes = sorted([3, 1, 2], reverse=True)
    return x * sizes[0] + min(sizes) + max([1.5, 0.5])


@CASES(lambda: (r(4, 8),))
def membership_in_constant_containers(x):
    if 3 in [1, 2, 3] and "a" not in ("b", "c") and 2 in {2: "x"}:
        return x + 1
    return x


# --------------------------------------------------------------------------- tuples

@CASES(lambda: ((r(4, 8), r(4, 8), r(4, 8)),))
def tuple_star_unpacking(xs):
    first, *rest = xs
    *init, last = xs
    return first + sum(rest), len(init) * last


@CASES(lambda: ((r(4, 8), (r(8), 2.0)),))
def nested_tuple_argument_unpacked(arg):
    x, (b, s) = arg
    return (x + b) * s


@CASES(two)
def tuple_returned_with_python_values(x, y):
    return (x + y, "name", 3, None, (x.shape, 2.5))


# --------------------------------------------------------------------------- dicts

@CASES(two)
def dict_built_and_read(x, y):
    d = {"a": x, "b": y}
    return d["a"] * d["b"]


@CASES(two)
def dict_setitem_update_and_del(x, y):
    d = {"a": x}
    d["b"] = y
    d.update({"c": x + y}, d=y * 2)
    del d["a"]
    return d


@CASES(two)
def dict_get_setdefault_pop(x, y):
    d = {"x": x}
    a = d.get("x") + d.get("missing", 1.0)
    d.setdefault("y", y)
    d.setdefault("x", y)
    b = d.pop("y") + d.pop("zzz", 0.0)
    return a, b, len(d)


@CASES(two)
def dict_constructors(x, y):
    a = dict(p=x, q=y)
    b = dict(zip(["p", "q"], [y, x]))
    c = dict([("p", x * 2)])
    return a["p"] + b["p"] + c["p"]


@CASES(lambda: ({"w": r(4, 8), "b": r(8)},))
def dict_argument_keys_values_items(params):
    keys = list(params.keys())
    total = sum(v.sum() for v in params.values())
    return keys, total, [k for k, v in params.items() if v.dim() == 2]


@CASES(lambda: (r(4, 8),))
def dict_with_formatted_string_keys(x):
    d = {}
    for i in range(3):
        d[f"layer{i}"] = x * i
    d["layer%d" % 7] = x
    return d["layer2"] + d["layer7"], "{}-{}".format("a", 1)


@CASES(lambda: (r(4, 8),))
def dict_with_int_and_tuple_keys(x):
    d = {0: x, (1, 2): x + 1}
    return d[0] * d[1, 2]


@CASES(two)
def dict_iteration_order_preserved(x, y):
    d = {"z": x, "a": y}
    d["m"] = x + y
    return list(d), [v.sum() for v in d.values()]


# --------------------------------------------------------------------------- sets

@CASES(lambda: (r(4, 8),))
def set_built_and_queried(x):
    s = {1, 2}
    s.add(3)
    s.discard(1)
    return x * len(s) + (2 in s)


@CASES(lambda: (r(4, 8),))
def set_operations_on_constants(x):
    a, b = {1, 2, 3}, {2, 3, 4}
    return x + len(a & b) + len(a | b) * 10 + len(a - b) * 100


# --------------------------------------------------------------------------- namedtuples and dataclasses

@CASES(two)
def namedtuple_created_and_read(x, y):
    p = Point(x, y=y)
    return p.x * p[1] + len(p)


@CASES(lambda: (Point(r(4, 8), r(4, 8)),))
def namedtuple_argument_fields_and_unpack(p):
    a, b = p
    return p.x - b + a * p.y


@CASES(two)
def namedtuple_returned(x, y):
    return Pair(x + 1, y * 2)


@CASES(lambda: (Pair(r(4, 8), r(4, 8), 0.5),))
def typing_namedtuple_replace_and_default(p):
    q = p._replace(weight=3.0)
    return (p.first + p.second) * p.weight + q.weight


@CASES(two)
def dataclass_created_and_read(x, y):
    s = State(x)
    s.count += 2
    s.tags.append("seen")
    return s.hidden * s.count + len(s.tags) + y


@CASES(lambda: (State(r(4, 8), 3), Options(2.0, 1.0)))
def dataclass_arguments_read(state, opts):
    return state.hidden * opts.scale + opts.shift + state.count


@CASES(lambda: (r(4, 8),), fresh=True)
def dataclass_returned(x):
    return State(x * 2, count=5, tags=["a"])


@CASES(lambda: (Pair(r(4, 8), r(4, 8), 0.5),))
def typing_namedtuple_method_and_property(p):
    return p.blended(0.25) + p.total + len(p._fields)


@CASES(lambda: (r(4, 8),))
def frozen_dataclass_method(x):
    return Options(2.0, 1.0).apply(x)


@CASES(lambda: (r(4, 8),), fresh=True)
def dataclass_post_init_runs_once_and_is_returned(x):
    t = Tracked(x * 2)
    t.history.append("used")
    t.value = t.value + t.norm
    return t


@CASES(lambda: (r(4, 8),))
def dataclass_fields_and_asdict_like(x):
    opts = Options(scale=0.5)
    names = [f.name for f in dataclasses.fields(opts)]
    return x * opts.scale, names


# --------------------------------------------------------------------------- caller-visible mutation

@CASES(lambda: ([r(4, 8)], r(4, 8)), fresh=True)
def caller_list_append_replayed(acc, x):
    acc.append(x * 2)
    acc.append("tag")
    return x + 1


@CASES(lambda: ([r(4, 8), r(4, 8), 1], r(4, 8)), fresh=True)
def caller_list_item_assignment_and_del_replayed(items, x):
    items[0] = items[1] + x
    items[2] = items[2] + 1
    del items[1]
    return items[0].sum()


@CASES(lambda: ([r(4, 8), r(4, 8)],), fresh=True)
def caller_list_pop_and_insert_replayed(items):
    last = items.pop()
    items.insert(0, last * 3)
    return last


@CASES(lambda: ({"a": r(4, 8)}, r(4, 8)), fresh=True)
def caller_dict_setitem_and_update_replayed(cache, x):
    cache["b"] = cache["a"] + x
    cache.update(c=x * 2, n=3)
    return cache["b"] * 2


@CASES(lambda: ({"a": r(4, 8), "b": r(4, 8), "k": 1}, r(4, 8)), fresh=True)
def caller_dict_pop_and_del_replayed(cache, x):
    a = cache.pop("a")
    del cache["b"]
    cache["k"] += 1
    return a + x


@CASES(lambda: ({"layers": [r(4, 8)], "meta": {"n": 0}}, r(4, 8)), fresh=True)
def caller_nested_containers_mutated(state, x):
    state["layers"].append(x.relu())
    state["meta"]["n"] += 1
    return state["layers"][0] + x


@CASES(lambda: ([1, 2], r(4, 8)), fresh=True)
def caller_list_cleared_and_refilled(items, x):
    items.clear()
    items.extend([x, x.sum()])
    return x * 0


@CASES(lambda: (set(), r(4, 8)), fresh=True)
def caller_set_add_replayed(seen, x):
    seen.add("forward")
    seen.add(tuple(x.shape))
    return x * 2


@CASES(lambda: ({"a", "b", 3}, r(4, 8)), fresh=True)
def caller_set_update_with_a_set_changed_later_and_returned(seen, x):
    extra = {"c", "d"}
    seen.update(extra)
    extra.add("e")  # after the update: the caller's set must not get "e"
    seen.discard("a")
    order = list(seen)  # iteration order as eager's
    return seen, x * len(seen), order, "b" in seen


@CASES(lambda: (State(r(4, 8)), r(4, 8)), fresh=True)
def caller_dataclass_fields_mutated(state, x):
    state.hidden = state.hidden + x
    state.count += 1
    state.tags.append("step")
    return state.hidden.sum()


@CASES(lambda: (r(4, 8),))
def list_of_aliases_mutated_in_place(x):
    ys = [x, x * 1]
    ys[0].add_(5)
    ys[1].mul_(2)
    return ys[0] is x, ys[1]


CASES.define_tests(globals())


# --------------------------------------------------------------------------- identity

def append_and_return(items, x):
    items.append(x + 1)
    return items


def test_returned_caller_list_is_the_same_object():
    jitted = fastdyn.jit(append_and_return)
    for n in range(1, 3):
        items = []
        out = jitted(items, r(4, 8))
        assert out is items and len(items) == 1, (out is items, len(items))
    report = fastdyn.explain(append_and_return, [], r(4, 8))
    assert report.graph_count == 1 and report.graph_break_count == 0, report


def build_list(x):
    return [x + 1, x + 2]


def test_returned_list_is_fresh_each_call():
    jitted = fastdyn.jit(build_list)
    x = r(4, 8)
    first = jitted(x)
    first.append("junk")
    second = jitted(x)
    assert first is not second
    assert_same(second, build_list(x))


# --------------------------------------------------------------------------- state that outlives the call

def append_to_default(x, acc=[]):  # noqa: B006 (the mutable default is the point)
    acc.append(x.sum())
    return x * len(acc)


def make_counter_closure():
    store = []

    def remember(x):
        store.append(x.mean())
        return x * len(store)
    return remember, store


def _twice_like_eager(fn, state, reset_state):
    """Two calls eagerly, then two through fastdyn from the same starting state: same outputs
    and the same state after each call (the second call sees the first one's mutation)."""
    x = r(4, 8)
    reset_state()
    expected = []
    for _ in range(2):
        out = fn(x)
        expected.append((out, list(state)))
    reset_state()
    jitted = fastdyn.jit(fn)
    for i, (want, want_state) in enumerate(expected):
        got = jitted(x)
        assert_same(got, want, f"call {i}: output")
        assert_same(list(state), want_state, f"call {i}: state")
    reset_state()
    report = fastdyn.explain(fn, x)
    reset_state()
    assert report.graph_count == 1 and report.graph_break_count == 0, report


def test_mutable_default_argument_grows_like_eager():
    acc = append_to_default.__defaults__[0]
    _twice_like_eager(append_to_default, acc, acc.clear)


def test_closure_list_appended_like_eager():
    remember, store = make_counter_closure()
    _twice_like_eager(remember, store, store.clear)
