"""The fixed helper classes every generated program starts with (generator.py's docstring says
what they are for)."""
PRELUDE = '''\
import dataclasses
import io
import math
import weakref

import torch
import torch.nn.functional as F


class State:
    """Side-effect targets of one call; make_state() makes a fresh one for every call."""

    def __init__(self):
        self.out = []
        self.log = []
        self.d = {}
        self.buf = io.StringIO()
        self.box = Box(0)
        self.w = torch.tensor(0.5, requires_grad=True)
        self.refs = {}

    def track(self, name, obj):
        self.refs[name] = weakref.ref(obj)
        return obj


def make_state():
    return State()


class Box:
    tag = 'box'

    def __init__(self, n, v=None):
        self.n = n
        self.v = v

    def bump(self, k=1):
        old = self.n
        self.n = old + k
        return old

    def scale(self, t):
        self.calls = getattr(self, 'calls', 0) + 1
        return t * self.n

    @property
    def double(self):
        self.reads = getattr(self, 'reads', 0) + 1
        return self.n * 2

    def report(self, buf):
        print('box', self.n, file=buf)
        return self.n


@dataclasses.dataclass
class Rec:
    a: int
    b: object = None
    tag: str = 'r'


class MyError(Exception):
    def __init__(self, code, msg='boom'):
        super().__init__(f'{msg}:{code}')
        self.code = code


class Ctx:
    def __init__(self, state, name, swallow=False):
        self.state = state
        self.name = name
        self.swallow = swallow

    def __enter__(self):
        self.state.log.append(('enter', self.name))
        return self

    def __exit__(self, et, ev, tb):
        self.state.log.append(('exit', self.name, None if et is None else et.__name__))
        return self.swallow


ACCESS = []


class Spy:
    def __init__(self, n):
        self.n = n

    def __getattribute__(self, name):
        ACCESS.append(name)
        return object.__getattribute__(self, name)


class Lazy:
    def __init__(self):
        self.hits = 0

    def __getattr__(self, name):
        return len(name)


class Counter:
    def __init__(self, start=0):
        self.hits = start

    def __call__(self, t):
        self.hits += 1
        return t + self.hits


g_n = 0
g_list = []
g_t = None
'''

# Kinds of values the generator keeps in its scopes.
