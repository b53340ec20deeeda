"""Where the generator is (scope.py): the variables it made, by kind and block, and the frame it is
writing statements into."""
# The kinds of generated variables.
T = "T"      # float tensor of the inputs' shape (n, n)
S = "S"      # 0-dim float tensor
B = "B"      # bool tensor (n, n)
I = "I"      # Python int
F = "F"      # Python float
L = "L"      # list of mixed Python values (ints, floats, strings, tensors)
TL = "TL"    # non-empty list of T tensors
D = "D"      # dict with str keys
O = "O"      # Box
R = "R"      # Rec (dataclass)
P = "P"      # Spy (user-defined __getattribute__)
Z = "Z"      # Lazy (__getattr__)
C = "C"      # Counter (callable object)
FN = "FN"    # closure: tensor -> tensor

GLOBALS = ("g_n", "g_list", "g_t")


class Var:
    __slots__ = ("name", "kind", "fn", "assignable")

    def __init__(self, name, kind, fn, assignable=True):
        self.name, self.kind, self.fn, self.assignable = name, kind, fn, assignable


class Frame:
    """Where statements are being generated: which function, loop, nesting."""

    def __init__(self, fn, has_state=True, in_loop=False, depth=0, is_f=False, inner=False):
        self.fn = fn
        self.has_state = has_state
        self.in_loop = in_loop
        self.depth = depth
        self.is_f = is_f
        self.inner = inner

    def child(self, **kw):
        fr = Frame(self.fn, self.has_state, self.in_loop, self.depth + 1, self.is_f, self.inner)
        for k, v in kw.items():
            setattr(fr, k, v)
        return fr


def indent(lines, n=1):
    pad = "    " * n
    return [pad + l for l in lines]


class Scopes:
    """Names and scopes: mixed into ProgramGenerator (generator.py)."""

    # ------------------------------------------------------------------ names and scopes
    def fresh(self, prefix):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def define(self, name, kind, fr, assignable=True):
        self.scopes[-1].append(Var(name, kind, fr.fn, assignable))
        return name

    def visible(self, kind, fr=None, assignable=False):
        out = []
        for scope in self.scopes:
            for v in scope:
                if v.kind != kind:
                    continue
                if assignable and (not v.assignable or fr is None or v.fn != fr.fn):
                    continue
                out.append(v)
        return out

    def pick(self, kind, fr=None, assignable=False):
        vs = self.visible(kind, fr, assignable)
        return self.r.choice(vs).name if vs else None

    def chance(self, p):
        return self.r.random() < p

    def rich(self):
        """Constructs that make fastdyn run a whole frame eagerly when any break occurs in it
        (cell variables from comprehensions and lambdas over locals, starred unpacking, abs() of
        an int): only in the profiles that have breaks anyway."""
        return self.profile in ("linear", "all")

    def brk(self, fr):
        """May a graph-breaking construct appear here?"""
        if self.profile in ("graph", "pure"):
            return False
        if self.profile == "linear":
            return not fr.in_loop
        return True
