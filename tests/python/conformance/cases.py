"""The table machinery of the conformance suite.

    CASES = Cases()

    @CASES(lambda: (r(4, 8),), graphs=1, breaks=0)
    def loop_over_enumerate_unrolled(x): ...

    CASES.define_tests(globals())   # at the end of the module: one test_<name> per function

Each generated test builds the inputs (under conftest's fixed seed) and runs fdcheck.check on
them, or with fresh=True fdcheck.check_fresh (inputs rebuilt for every run, Python objects
compared after the call: caller-visible mutation). `xfail="<feature>"` marks a case that fails
only because that issue-3 feature has not landed yet; it is strict, so the case turns red the
moment the feature works and the marker must go.
"""
import pytest
import torch

from fdcheck import check, check_fresh


def r(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def pos(*shape):
    return torch.rand(*shape) + 0.5


def ints(*shape, low=0, high=10):
    return torch.randint(low, high, shape)


# (The RECOMPILE marker is gone with its last case: captures whose guards failed on the very next
# call, from module hook dicts guarded as locals, bound methods guarded by identity, and floats
# crossing a break guarded by value, all fixed. A new missing feature gets xfail("<feature>").)


def xfail(feature):
    return pytest.mark.xfail(strict=True, reason=f"issue 3: {feature}")


class Case:
    __slots__ = ("fn", "make_args", "graphs", "breaks", "xfail", "fresh", "opts")

    def __init__(self, fn, make_args, graphs, breaks, xfail, fresh, opts):
        self.fn, self.make_args, self.graphs, self.breaks = fn, make_args, graphs, breaks
        self.xfail, self.fresh, self.opts = xfail, fresh, opts

    def run(self):
        if self.fresh:
            check_fresh(self.fn, self.make_args, graphs=self.graphs, breaks=self.breaks, **self.opts)
        else:
            check(self.fn, *self.make_args(), graphs=self.graphs, breaks=self.breaks, **self.opts)


class Cases:
    def __init__(self):
        self.cases = []

    def __call__(self, make_args, graphs=1, breaks=0, xfail=None, fresh=False, **opts):
        def register(fn):
            self.cases.append(Case(fn, make_args, graphs, breaks, xfail, fresh, opts))
            return fn
        return register

    def define_tests(self, namespace):
        for case in self.cases:
            name = "test_" + case.fn.__name__
            assert name not in namespace, f"two conformance functions named {case.fn.__name__}"

            def test(case=case):
                case.run()
            test.__name__ = test.__qualname__ = name
            test.__doc__ = case.fn.__doc__
            if case.xfail:
                test = xfail(case.xfail)(test)
            namespace[name] = test
