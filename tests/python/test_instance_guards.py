"""Plain objects of Python classes are guarded by type and alias slot, not identity
(GuardKind::Instance): an object made per call (transformers' DynamicCache, a ModelOutput crossing
a break) hits the entry its predecessor compiled. Each test here makes a program whose result
would be wrong, or would differ from eager, if the trace leaned on the very object it saw: where
the trace depends on the object itself (identity against a fixed object, hash, id, equality,
len/bool, a missing attribute), it must pin it with an identity guard and recompile instead.
Every call is compared with eager on the same objects."""
import torch

from fdcheck import assert_same, call_with_stats, fastdyn


class Box:
    def __init__(self, scale, **extra):
        self.scale = scale
        for k, v in extra.items():
            setattr(self, k, v)


class WithClassDefault:
    scale = 2.0  # a class-level value an instance may shadow


class Sized:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


class Truthy:
    def __init__(self, on):
        self.on = on

    def __bool__(self):
        return self.on


class Keyed:
    def __init__(self, k):
        self.k = k

    def __eq__(self, other):
        return isinstance(other, Keyed) and self.k == other.k

    def __hash__(self):
        return hash(self.k)


DEFAULT = Box(10.0)


def run_both(fn, make_args, calls):
    """Calls fastdyn.jit(fn) and fn on fresh objects from make_args(i), i in calls; returns the
    stats of each jitted call. The objects are made twice so that side effects do not mix."""
    jitted = fastdyn.jit(fn)
    deltas = []
    for i in calls:
        got, d = call_with_stats(jitted, *make_args(i))
        assert_same(got, fn(*make_args(i)), f"call {i}")
        deltas.append(d)
    return deltas


X = torch.randn(4)


def scaled(box, x):
    return x * box.scale + 1


def test_an_object_made_per_call_hits_the_entry_of_the_previous_one():
    deltas = run_both(scaled, lambda i: (Box(2.0), X), range(5))
    assert sum(d["frames_compiled"] for d in deltas) == 1, deltas
    assert all(d["cache_hits"] == 1 for d in deltas[1:]), deltas


def test_attribute_values_are_still_guarded():
    deltas = run_both(scaled, lambda i: (Box(2.0 + (i % 2)), X), range(4))
    assert sum(d["frames_compiled"] for d in deltas) == 2, deltas


def write_through_one_read_through_other(a, b, x):
    a.scale = 3.0
    return x * b.scale


def test_aliasing_between_two_objects_is_guarded():
    def make(i):
        a = Box(1.0)
        return (a, a if i % 2 == 0 else Box(1.0), X)
    deltas = run_both(write_through_one_read_through_other, make, range(4))
    assert sum(d["frames_compiled"] for d in deltas) == 2, deltas


def is_default(box, x):
    if box is DEFAULT:  # both read from outside: their alias guards answer it
        return x + 1
    return x * box.scale


def _is_fixed(box, fixed=DEFAULT):  # `fixed` is a trace-time constant (a default), not a read
    return box is fixed


def is_fixed(box, x):
    if _is_fixed(box):
        return x + 1
    return x * box.scale


def test_identity_between_two_objects_read_from_outside_follows_them():
    run_both(is_default, lambda i: (DEFAULT if i % 2 == 0 else Box(3.0), X), range(4))


def test_identity_against_a_fixed_object_of_the_same_class_pins_it():
    run_both(is_fixed, lambda i: (DEFAULT if i % 2 == 0 else Box(3.0), X), range(4))


def is_none_or_scaled(box, x):
    if box is None:
        return x
    return x * box.scale


def test_identity_against_none_needs_no_pin():
    deltas = run_both(is_none_or_scaled, lambda i: (Box(2.0), X), range(3))
    assert sum(d["frames_compiled"] for d in deltas) == 1, deltas


def class_level(obj, x):
    return x * obj.scale


def test_a_class_level_value_shadowed_by_the_instance_is_told_apart():
    def make(i):
        o = WithClassDefault()
        if i % 2:
            o.scale = 5.0
        return (o, X)
    run_both(class_level, make, range(4))


def uses_len_and_bool(s, t, x):
    return x * len(s) + (1 if t else -1)


def test_len_and_bool_by_python_methods_follow_the_object():
    run_both(uses_len_and_bool, lambda i: (Sized(i + 1), Truthy(i % 2 == 0), X), range(4))


def has_extra(box, x):
    if hasattr(box, "extra"):
        return x * 2 + box.extra
    return x * 2


def test_a_missing_attribute_is_not_assumed_missing_on_the_next_object():
    run_both(has_extra, lambda i: (Box(1.0, extra=float(i)) if i % 2 else Box(1.0), X), range(4))


def keyed_lookup(key, x):
    table = {Keyed(1): 2.0, Keyed(2): 3.0}
    return x * table.get(key, 1.0) + (1.0 if key == Keyed(2) else 0.0)


def test_equality_and_hash_by_python_methods_follow_the_object():
    run_both(keyed_lookup, lambda i: (Keyed(i % 3), X), range(6))


def fixed_list_membership(box, x):
    return x + (1.0 if box in KNOWN else 0.0)


KNOWN = [DEFAULT]


def test_membership_in_a_fixed_list_follows_the_object():
    run_both(fixed_list_membership, lambda i: (DEFAULT if i % 2 else Box(10.0), X), range(4))


ID_OF_DEFAULT = id(DEFAULT)


def identity_numbers(box, x):
    return x + (id(box) == ID_OF_DEFAULT) + len(repr(box.scale))


def test_id_of_an_object_follows_the_object():
    run_both(identity_numbers, lambda i: (DEFAULT if i % 2 else Box(10.0), X), range(4))


def mutate_and_return(box, x):
    box.scale = box.scale * 2
    box.last = x.relu()
    return box


def test_writes_land_on_the_object_of_this_call_and_it_is_returned():
    jitted = fastdyn.jit(mutate_and_return)
    for i in range(3):
        box, ref = Box(float(i)), Box(float(i))
        out = jitted(box, X)
        mutate_and_return(ref, X)
        assert out is box
        assert box.scale == ref.scale
        assert_same(box.last, ref.last)


class Node:
    def __init__(self, value, child=None):
        self.value = value
        self.child = child


def walk(node, x):
    while node is not None:
        x = x * node.value
        node = node.child
    return x


def test_nested_objects_made_per_call_hit_one_entry():
    deltas = run_both(walk, lambda i: (Node(2.0, Node(3.0)), X), range(4))
    assert sum(d["frames_compiled"] for d in deltas) == 1, deltas
    run_both(walk, lambda i: (Node(2.0, Node(3.0, Node(0.5))), X), range(2))  # a longer chain recompiles


# --- what the class answers, and what the object itself lacks (found by an adversarial audit) ---
# Each test mutates one object or its class between calls; every call is compared with eager.

class Plain:
    def m(self, x):
        return x + 1


def reads_missing(x, o):
    return x + getattr(o, "n", 0) + (10 if hasattr(o, "m2") else 0)


def test_a_missing_attribute_that_appears_on_the_same_object_is_seen():
    o = Plain()
    deltas = []
    for i in range(3):
        deltas += run_both(reads_missing, lambda _: (X, o), [i])
        o.n, o.m2 = i + 1, 1
    assert sum(d["frames_compiled"] for d in deltas) >= 2, deltas


def test_a_missing_attribute_that_appears_on_the_class_is_seen():
    class Late:
        pass
    o = Late()
    run_both(reads_missing, lambda _: (X, o), [0])
    Late.n = 5
    run_both(reads_missing, lambda _: (X, o), [1])


def calls_m(x, o):
    return o.m(x)


def test_an_instance_attribute_shadowing_a_method_is_seen():
    def make(i):
        o = Plain()
        if i % 2:
            o.m = lambda x: x * 100
        return o, X
    run_both(lambda o, x: calls_m(x, o), make, range(4))


def test_a_method_replaced_on_the_class_is_seen():
    class Swapped:
        def m(self, x):
            return x + 1
    run_both(calls_m, lambda _: (X, Swapped()), [0, 1])
    Swapped.m = lambda self, x: x * 100
    run_both(calls_m, lambda _: (X, Swapped()), [2, 3])


def test_a_write_is_seen_by_getattr_with_a_default_and_hasattr_in_the_same_call():
    def f(x, a):
        a.h = 5
        return x + getattr(a, "h", 0), hasattr(a, "h")
    run_both(f, lambda _: (X, Plain()), range(3))


def test_a_dict_iterated_in_another_key_order_is_told_apart():
    def f(x, d):
        for v in d.values():
            x = x * 2 + v
        return x
    run_both(f, lambda i: (X, {"a": 1.0, "b": 2.0} if i % 2 == 0 else {"b": 2.0, "a": 1.0}), range(4))


REGISTRY = {1: 5}


def test_a_global_dict_with_int_keys_is_guarded_by_its_contents():
    def f(x):
        return x + REGISTRY.get(1, 0) + (10 if 1 in REGISTRY else 0)
    jitted = fastdyn.jit(f)
    for change in (lambda: None, lambda: REGISTRY.__setitem__(1, 7), lambda: (REGISTRY.pop(1), REGISTRY.__setitem__(2, 0))):
        change()
        assert_same(jitted(X), f(X))


def test_minus_zero_is_not_zero_for_a_float_guard():
    def f(x, o):
        return x * o.scale
    got = run_both(f, lambda i: (torch.ones(1), Box(-0.0 if i == 0 else 0.0)), range(2))
    assert sum(d["frames_compiled"] for d in got) == 2, got
