"""Random small Python programs that mix tensor ops with Python constructs, for differential
testing of fastdyn against eager (see runner.py).

`generate(seed)` returns the source text of a module. It is deterministic: the same seed gives the
same text (one `random.Random(seed)`, no other source of randomness). The module defines

    make_state()        a fresh `State` (side-effect targets: lists, a dict, a Box, a StringIO,
                        a weight requiring grad, and `track(name, obj)`, which registers a weakref
                        so that the runner can compare object lifetimes)
    f(x, y, state)      the program: x and y are float32 tensors of one square shape (n, n)

plus fixed helper classes (PRELUDE: a plain class with methods and a property, a dataclass, an
Exception subclass with an attribute, a context manager recording enter/exit, a class with a
user-defined __getattribute__, one with __getattr__, a callable counter) and a few generated
helper functions `h0, h1, ...`, which f calls.

The body of f mixes, at random positions and nestings: tensor ops (pointwise, reductions, matmul,
views, indexing, cat, where, comparisons, in-place ops on locals and on the inputs), Python int and
float arithmetic, attribute reads and writes (read-before-write, setattr/getattr/hasattr, del),
dataclass instances built in the frame and written after construction, list/dict/tuple building
and mutation, unpacking with a starred target, comprehensions, closures with `nonlocal`, globals
read and written, try/except/else/finally, custom exceptions (caught and escaping f), `with`
blocks (a recording context manager, torch.no_grad()), for/while loops with break/continue, and
graph-breaking calls (print to a StringIO, .item() feeding a branch, .tolist(), len(str(...)),
id() comparisons, int()/float()/bool() of tensors).

Programs are deterministic at run time: no randomness, no id() values or addresses in any output,
no iteration over sets. Variables are block-scoped by the generator (a name made inside a block is
used only inside it), so programs rarely fail on unbound names; what they do raise (on purpose, or
an IndexError of an out-of-range shape) must be raised identically under fastdyn.
"""
import random

from prelude import PRELUDE
from scope import B, D, F, I, L, O, R, S, T, TL, Frame, Var, indent
from statements import Statements


class ProgramGenerator(Statements):
    def __init__(self, seed, max_stmts=None):
        self.seed = seed
        self.r = random.Random(seed)
        self.counter = 0
        self.scopes = []
        self.helpers = []          # names of generated helper functions
        self.max_stmts = max_stmts if max_stmts is not None else self.r.randint(8, 28)
        self.budget = 0
        # A profile decides which constructs appear. fastdyn runs a frame eagerly where a graph
        # break meets a loop, a try/with block or a cell variable, so profiles that avoid those
        # combinations keep the compiled paths (graphs, continuations, side-effect replay) covered.
        #   pure:   no graph-breaking construct, no state, no globals, no closures: f is mostly
        #           one graph that builds and returns tensors, objects, dataclasses, containers
        #   graph:  no graph-breaking call (mutations of the caller's containers still break)
        #   linear: graph breaks, but not inside loops, and no try/with/closures
        #   all:    everything, anywhere
        x = self.r.random()
        self.profile = ("pure" if x < 0.2 else "graph" if x < 0.45 else "linear" if x < 0.75
                        else "all")

    def ret_expr(self, fr):
        cands = []
        for kind in (T, T, S, I, F, L, D, O, R, B, TL):
            v = self.pick(kind)
            if v:
                cands.append(v)
        self.r.shuffle(cands)
        k = self.r.randint(1, 4)
        chosen = cands[:k] or [self.tvar()]
        if len(chosen) == 1 and self.chance(0.5):
            return chosen[0]
        return "(" + ", ".join(chosen) + ",)"

    def helper(self, idx):
        name = f"h{idx}"
        fr = Frame(name, has_state=self.profile != "pure", depth=0)
        self.scopes = [[Var("a", T, name), Var("b", T, name)]]
        self.budget = self.r.randint(2, 6)
        body = []
        while self.budget > 0:
            body += self.statement(fr)
        ret = self.tensor(fr, 1)
        self.scopes = []
        return [f"def {name}(a, b, state):"] + indent(body + [f"return {ret}"])

    def function_f(self):
        fr = Frame("f", has_state=self.profile != "pure", depth=0, is_f=True)
        self.scopes = [[Var("x", T, "f"), Var("y", T, "f"), Var("n", I, "f")]]
        self.budget = self.max_stmts
        body = ["global g_n, g_list, g_t", "n = x.shape[0]"]
        while self.budget > 0:
            body += self.statement(fr)
        body.append(f"return {self.ret_expr(fr)}")
        self.scopes = []
        return ["def f(x, y, state):"] + indent(body)

    def generate(self):
        parts = [PRELUDE]
        nh = self.r.randint(0, 2)
        helper_src = []
        for i in range(nh):
            helper_src.append("\n".join(self.helper(i)))
            self.helpers.append(f"h{i}")
        parts += helper_src
        parts.append("\n".join(self.function_f()))
        return "\n\n\n".join(parts) + "\n"


def generate(seed, max_stmts=None):
    """The source text of the program of `seed` (deterministic)."""
    return ProgramGenerator(seed, max_stmts).generate()


if __name__ == "__main__":
    import sys
    print(generate(int(sys.argv[1]) if len(sys.argv) > 1 else 0))
