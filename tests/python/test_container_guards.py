"""What a trace reads from containers, classes, functions and modules that outlive the call is
guarded, so that a change made between calls is seen: dict keys of any hashable kind (tuples,
enum members, objects), values under those keys (tensors too), sets, OrderedDict order,
defaultdict, dict subclasses, True against 1 and 1.0 against 1 as keys, a method's __code__ and
__defaults__, class attributes read through a classmethod, a class's forward replaced, missing
attributes of modules and nn.Modules, and a class's __getattr__ with effects (never run by the
trace). Each scenario runs once plainly and once under fastdyn.jit, with the same mutations
between calls, and every result and effect must match."""
import collections
import enum
import types

import torch

from fdcheck import fastdyn


def norm(x):
    """A comparable picture of a result: tensors by dtype, shape and values, exceptions by type."""
    if isinstance(x, torch.Tensor):
        return ("T", str(x.dtype), tuple(x.shape), tuple(x.detach().flatten().tolist()))
    if isinstance(x, BaseException):
        return ("E", type(x).__name__)
    if isinstance(x, (tuple, list)):
        return (type(x).__name__,) + tuple(norm(v) for v in x)
    if isinstance(x, dict):
        return ("dict",) + tuple((norm(k), norm(v)) for k, v in x.items())
    if isinstance(x, (set, frozenset)):
        return (type(x).__name__,) + tuple(sorted(repr(norm(v)) for v in x))
    return (type(x).__name__, x)


def same_under_jit(scenario):
    """Runs scenario(J, log) with J = identity and with J = fastdyn.jit; the logs must match."""
    logs = []
    for jit in (lambda f: f, fastdyn.jit):
        torch.manual_seed(0)
        log = []

        def call(f, *args, _log=log):
            try:
                out = f(*args)
            except Exception as e:  # noqa: BLE001 - the exception is part of the result
                out = e
            _log.append(norm(out))
            return out

        scenario(jit, call, log)
        logs.append(log)
    assert logs[1] == logs[0]


def test_dict_with_tuple_keys_follows_item_changes():
    d = {(1, 2): 3.0, (2, 1): 4.0}

    def scenario(J, call, log):
        def f(t, a, b):
            v = d.get((a, b))
            return t - 1 if v is None else t * v
        g, t = J(f), torch.randn(4)
        call(g, t, 1, 2), call(g, t, 2, 1), call(g, t, 1, 1)
        d[(1, 1)] = 9.0
        call(g, t, 1, 1)
        d[(1, 2)] = 0.5
        call(g, t, 1, 2)
        del d[(2, 1)]
        call(g, t, 2, 1)
        d.clear(), d.update({(1, 2): 3.0, (2, 1): 4.0})
    same_under_jit(scenario)


def test_dict_with_object_and_enum_keys_follows_new_keys():
    class K:
        pass

    class E(enum.Enum):
        A = 1
        B = 2

    def scenario(J, call, log):
        k1, k2 = K(), K()
        by_obj, by_enum = {k1: 1.0}, {E.A: 1.0}

        def f(t, k, e):
            return t * by_obj.get(k, 0.5) + by_enum.get(e, -1.0), len(by_enum)
        g, t = J(f), torch.ones(4)
        call(g, t, k2, E.B), call(g, t, k2, E.B)
        by_obj[k2] = 3.0
        by_enum[E.B] = 4.0
        call(g, t, k2, E.B), call(g, t, k1, E.A)
    same_under_jit(scenario)


def test_dict_with_int_keys_and_tensor_values_follows_new_keys():
    def scenario(J, call, log):
        d = {1: torch.ones(4)}

        def f(t, k):
            return (t + d[k]) if k in d else t - 1
        g, t = J(f), torch.zeros(4)
        call(g, t, 2), call(g, t, 2)
        d[2] = torch.ones(4) * 5
        call(g, t, 2), call(g, t, 2)
        del d[1]
        call(g, t, 1)
        d[2] = torch.ones(4) * 7  # a new tensor under the same key
        call(g, t, 2)
    same_under_jit(scenario)


def test_true_and_one_and_one_point_zero_are_different_keys():
    def scenario(J, call, log):
        d = {True: "a"}

        def f(t):
            return [k for k in d], [type(k).__name__ for k in d], t * 2
        g, t = J(f), torch.randn(4)
        call(g, t), call(g, t)
        del d[True]
        d[1] = "a"
        call(g, t), call(g, t)
        del d[1]
        d[1.0] = "a"
        call(g, t), call(g, t)
    same_under_jit(scenario)


def test_a_set_the_function_adds_to_is_seen_on_the_next_call():
    def scenario(J, call, log):
        seen = set()

        def f(t, key):
            if key in seen:
                return t * 0
            seen.add(key)
            return t + len(seen)
        g, t = J(f), torch.ones(4)
        for k in [(1, 2), (1, 2), (2, 1), (1, 2), (3, 3), (2, 1)]:
            call(g, t, k)
        log.append(norm(seen))
    same_under_jit(scenario)


def test_a_cache_dict_filled_by_the_function_returns_the_cached_tensor():
    class Holder:
        pass

    def scenario(J, call, log):
        cache, o = {}, Holder()
        o.cache = {}

        def f(t, k):
            if k in cache:
                return cache[k]
            r = t * 2
            cache[k] = r
            return r

        def m(o, t, k):
            if k in o.cache:
                return o.cache[k]
            r = t * 3
            o.cache[k] = r
            return r
        g, h, t = J(f), J(m), torch.ones(4)
        outs = [call(g, t, k) for k in [1, 1, 2, 1, 2, True]]
        log.append([outs[0] is outs[1], outs[2] is outs[4], outs[5] is outs[0], len(cache)])
        outs = [call(h, o, t, k) for k in [(1, 2), (1, 2), (3, 4), (1, 2), (3, 4)]]
        log.append([outs[0] is outs[1], outs[2] is outs[4], len(o.cache)])
    same_under_jit(scenario)


def test_defaultdict_and_ordered_dict_order():
    def scenario(J, call, log):
        counts = collections.defaultdict(int)
        order = collections.OrderedDict([("a", 1), ("b", 2)])

        def f(t, k):
            counts[k] += 1
            return t * counts[k], len(counts)

        def g(t):
            return [k for k in order], t * list(order.values())[0]
        jf, jg, t = J(f), J(g), torch.ones(4)
        for k in [1, 1, (1, 2), (1, 2), 1, True]:
            call(jf, t, k)
        log.append(norm(dict(counts)))
        call(jg, t), call(jg, t)
        order.move_to_end("a")
        call(jg, t), call(jg, t)
    same_under_jit(scenario)


def test_a_dict_subclass_registry_follows_its_contents():
    class Registry(dict):
        def lookup(self, name):
            return super().get(name) or {}

    def scenario(J, call, log):
        reg = Registry(a={"x": 2.0})

        def f(t):
            return t * sum(reg.lookup("a").values())
        g, t = J(f), torch.ones(4)
        call(g, t), call(g, t)
        reg["a"]["y"] = 3.0  # a change inside a nested dict
        call(g, t), call(g, t)
        reg["a"] = {"z": -1.0}
        call(g, t)
    same_under_jit(scenario)


def test_keys_views_of_dicts_combine_as_sets():
    def scenario(J, call, log):
        d, e = {1: "a", 2: "b"}, {2: "x", 3: "y"}

        def f(t):
            return sorted(d.keys() & e.keys()), sorted(d.keys() | e.keys()), t + 1
        g, t = J(f), torch.ones(4)
        call(g, t), call(g, t)
        e[1] = "q"
        call(g, t)
        del d[2]
        call(g, t)
    same_under_jit(scenario)


def test_a_method_whose_code_or_defaults_are_replaced_is_seen():
    def scenario(J, call, log):
        class C:
            def m(self, t, k=2):
                return t * k

        def other(self, t, k=2):
            return t + 100

        def f(o, t):
            return o.m(t)
        o, g, t = C(), J(f), torch.ones(4)
        call(g, o, t), call(g, o, t)
        C.m.__defaults__ = (5,)
        call(g, o, t), call(g, o, t)
        C.m.__code__ = other.__code__
        call(g, o, t), call(g, o, t)
    same_under_jit(scenario)


def test_a_class_attribute_read_through_a_classmethod_is_guarded():
    def scenario(J, call, log):
        class C:
            f = 2

            @classmethod
            def cm(cls, t):
                return t * cls.f

            @staticmethod
            def sm(t):
                return t + 1

        def f(o, t):
            return o.cm(t) + o.sm(t) + type(o).f
        o, g, t = C(), J(f), torch.ones(4)
        call(g, o, t), call(g, o, t)
        C.f = 3
        call(g, o, t)
        C.sm = staticmethod(lambda t: t * 100)
        call(g, o, t)
        C.cm = classmethod(lambda cls, t: t * 0)
        call(g, o, t)
    same_under_jit(scenario)


def test_a_class_getattr_with_effects_runs_as_often_as_in_eager():
    def scenario(J, call, log):
        class C:
            def __init__(self):
                self.calls = 0

            def __getattr__(self, name):
                self.calls += 1
                if name.startswith("x"):
                    return len(name)
                raise AttributeError(name)

        def f(o, t):
            return t * o.xyz + getattr(o, "q", 10), hasattr(o, "zz")
        o, g, t = C(), J(f), torch.ones(4)
        for _ in range(4):
            call(g, o, t)
            log.append(o.calls)
        o.q = 1
        call(g, o, t)
        log.append(o.calls)
    same_under_jit(scenario)


def test_missing_attributes_of_a_module_and_an_nn_module_that_appear_later():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            y = self.lin(x)
            if hasattr(self, "extra"):
                y = y + self.extra
            return y

    def scenario(J, call, log):
        mod = types.ModuleType("mm")
        mod.a = 1.0

        def f(t):
            return t * getattr(mod, "b", 2.0) + mod.a
        g, t = J(f), torch.ones(4)
        call(g, t), call(g, t)
        mod.b = 10.0
        call(g, t)
        m = M()
        jm, x = J(m), torch.randn(4)
        with torch.no_grad():
            call(jm, x), call(jm, x)
            m.extra = 3.0
            call(jm, x)
            m.extra = torch.nn.Parameter(torch.ones(4))  # into _parameters
            call(jm, x)
            del m.extra
            m.register_buffer("extra", torch.full((4,), 2.0))  # into _buffers
            call(jm, x)
    same_under_jit(scenario)


def test_a_forward_replaced_on_the_class_is_seen():
    class M(torch.nn.Module):
        def forward(self, x):
            return x + 1

    def scenario(J, call, log):
        m = M()
        g, x = J(lambda x: m(x)), torch.randn(4)
        call(g, x), call(g, x)
        saved = M.forward
        M.forward = lambda self, x: x * 100
        try:
            call(g, x)
        finally:
            M.forward = saved
        call(g, x)
    same_under_jit(scenario)


def test_module_parameters_and_buffers_unroll_and_follow_changes():
    """Module.parameters()/named_parameters()/buffers()/named_buffers() are traced (no break: they
    were a generator building a set of tensors): eager's order, prefixes, recurse=False, a module
    or tensor reached twice listed once; a parameter added or set to None between calls is seen."""
    nn = torch.nn
    torch.manual_seed(0)
    shared = nn.Linear(3, 3)
    tied = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3), nn.Linear(3, 3))
    tied[2].weight = tied[0].weight
    models = [nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)),
              nn.ModuleDict({"a": shared, "b": shared, "c": nn.Linear(3, 1)}), tied]

    def f(m, x):
        n = sum(p.numel() for p in m.parameters())
        names = [k for k, _ in m.named_parameters()]
        bufs = [k for k, _ in m.named_buffers(prefix="net")]
        top = [k for k, _ in m.named_parameters(recurse=False)]
        return x * n, names, bufs, top, next(m.parameters()).device, len(list(m.buffers()))

    g = fastdyn.jit(f)
    x = torch.randn(3)
    before = fastdyn.stats()["graph_breaks"]
    for m in models:
        for _ in range(2):
            assert norm(g(m, x)) == norm(f(m, x))
    assert fastdyn.stats()["graph_breaks"] == before
    m = models[0]
    m[2].register_parameter("extra", nn.Parameter(torch.ones(2)))
    assert norm(g(m, x)) == norm(f(m, x))
    m[2].bias = None
    assert norm(g(m, x)) == norm(f(m, x))
