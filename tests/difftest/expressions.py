"""The expressions of generated programs (tensors, Python numbers, conditions): mixed into
ProgramGenerator (generator.py)."""
from scope import B, C, D, F, FN, I, L, O, P, R, S, T, TL, Z, Scopes


class Expressions(Scopes):
    # ------------------------------------------------------------------ expressions
    def tvar(self):
        return self.pick(T)

    def tensor(self, fr, d=0):
        r = self.r
        a = self.tvar()
        if d >= 2 or self.chance(0.25):
            return a
        b = self.tvar()
        sub = lambda: self.tensor(fr, d + 1)  # noqa: E731
        opts = [
            lambda: f"({sub()} + {sub()})",
            lambda: f"({sub()} * {sub()})",
            lambda: f"({sub()} - {b})",
            lambda: f"torch.relu({sub()})",
            lambda: f"{a}.relu()",
            lambda: f"torch.sin({sub()})",
            lambda: f"{a}.cos()",
            lambda: f"torch.exp({a}.clamp(-4, 4))",
            lambda: f"torch.tanh({sub()})",
            lambda: f"{a}.abs()",
            lambda: f"(-{a})",
            lambda: f"({a} @ {b})",
            lambda: f"torch.matmul({a}, {b}) * 0.25",
            lambda: f"{a}.t()",
            lambda: f"{a}.transpose(0, 1)",
            lambda: f"{a}.reshape(-1).reshape({a}.shape)",
            lambda: f"{a}.reshape({a}.shape[1], -1)",
            lambda: f"{a}.contiguous()",
            lambda: f"{a}.clone()",
            lambda: f"({a} + {a}[0])",
            lambda: f"({a} * {b}[:, 1:2])",
            lambda: f"torch.cat([{a}[1:], {a}[:1]], 0)",
            lambda: f"torch.cat([{a}, {b}], 1)[:, :{a}.shape[1]]",
            lambda: f"torch.where({self.boolt(fr, d + 1)}, {a}, {b})",
            lambda: f"torch.where({a} > 0, {a}, {b} * 0.5)",
            lambda: f"({sub()} + {self.num(fr)})",
            lambda: f"({sub()} * {self.num(fr)})",
            lambda: f"({a} * {self.scalar(fr, d + 1)})",
            lambda: f"({a} + {a}.sum(0, keepdim=True))",
            lambda: f"({a}.mean(1, keepdim=True) - {a})",
            lambda: f"torch.stack([{a}, {b}]).sum(0)",
            lambda: f"torch.zeros_like({a})",
            lambda: f"torch.ones({a}.shape) * {self.num(fr)}",
            lambda: f"{a}[:, [1, 0] + list(range(2, {a}.shape[1]))]",
            lambda: f"{a}.flip(0)",
            lambda: f"torch.maximum({a}, {b})",
            lambda: f"{a}.softmax({r.choice([0, 1, -1])})",
            lambda: f"{a}.cumsum({r.choice([0, 1])})",
            lambda: f"({sub()}).pow(2)",
            lambda: f"({sub()} / ({b}.abs() + 1))",
            lambda: f"{a}.masked_fill({a} < 0, {self.num(fr)})",
            lambda: f"{a}.unsqueeze(0).squeeze(0)",
            lambda: f"{a}.view({a}.shape[0], -1)" if r.random() < 0.5 else f"{a}.expand({a}.shape)",
            lambda: f"({a}.double() * 2).float()",
            lambda: f"({a} + {a}.long().sum())",
            lambda: f"F.gelu({a})" if r.random() < 0.5 else f"F.layer_norm({a}, ({a}.shape[-1],))",
            lambda: f"{a}.clamp(min={self.flt_lit()})",
        ]
        if fr.has_state:
            opts.append(lambda: f"({a} * state.w)")
        if self.helpers and not fr.inner and fr.fn == "f":
            opts.append(lambda: f"{r.choice(self.helpers)}({sub()}, {b}, state)")
            opts.append(lambda: f"{r.choice(self.helpers)}({sub()}, state=state, b={b})")
        o = self.pick(O)
        if o:
            opts.append(lambda: f"{o}.scale({a})")
        c = self.pick(C)
        if c:
            opts.append(lambda: f"{c}({a})")
        fn = self.pick(FN)
        if fn:
            opts.append(lambda: f"{fn}({sub()})")
        tl = self.pick(TL)
        if tl:
            opts.append(lambda: f"torch.stack({tl}).sum(0)")
            opts.append(lambda: f"{tl}[-1]")
        return r.choice(opts)()

    def flt_lit(self):
        return self.r.choice(["0.5", "-0.25", "1.5", "-1.0"])

    def scalar(self, fr, d=0):
        a, b = self.tvar(), self.tvar()
        opts = [
            f"{a}.sum()", f"{a}.mean()", f"({a} * {b}).sum()", f"{a}[0, 1]", f"{a}.max()",
            f"{a}.norm()", f"torch.dot({a}[0], {b}[1])", f"{a}.abs().min()",
            f"{a}[{a} > 0].sum()", f"{a}.double().mean().float()", f"{a}.amax()",
            f"sum(t.sum() for t in ({a}, {b}))",
        ]
        s = self.pick(S)
        if s:
            opts += [s, f"({s} * 2)", f"({s} + {a}.sum())"]
        return self.r.choice(opts)

    def boolt(self, fr, d=0):
        a, b = self.tvar(), self.tvar()
        opts = [f"({a} > {b})", f"({a} < 0)", f"({a} >= {self.scalar(fr, d + 1)})",
                f"(({a} > 0) & ({b} < 0))", f"({a} == {a})", f"{a}.isnan()",
                f"torch.logical_or({a} > 1, {b} < -1)"]
        bv = self.pick(B)
        if bv:
            opts += [f"~{bv}", f"({bv} | ({a} > 0.5))", bv]
        return self.r.choice(opts)

    def num(self, fr):
        """A Python int or float expression."""
        return self.integer(fr) if self.chance(0.6) else self.flt(fr)

    def integer(self, fr, d=0):
        r = self.r
        if d >= 2 or self.chance(0.3):
            iv = self.pick(I)
            return iv if iv and self.chance(0.7) else str(r.randint(0, 5))
        sub = lambda: self.integer(fr, d + 1)  # noqa: E731
        a = self.tvar()
        opts = [
            lambda: f"({sub()} + {sub()})", lambda: f"({sub()} * {sub()} % 7)",
            lambda: f"({sub()} - 1)", lambda: f"({sub()} // 2)", lambda: f"({sub()} % 3)",
            lambda: f"{a}.shape[0]", lambda: f"{a}.dim()", lambda: f"({a}.numel() // 4)",
            lambda: f"max({sub()}, {sub()})", lambda: f"min({sub()}, 3)",
            lambda: f"abs({sub()})" if self.rich() else f"max({sub()}, 0)",
            lambda: f"len(str({sub()}))",
        ]
        if self.brk(fr):
            opts += [lambda: f"int({self.boolt(fr, d + 1)}.sum())", lambda: f"int({a}.argmax())"]
        if (fr.is_f or fr.fn == "f") and self.profile != "pure":
            opts.append(lambda: "g_n")
        for kind, tmpl in ((L, "len({})"), (D, "len({})"), (O, "{}.n"), (R, "{}.a"), (P, "{}.n"),
                           (Z, "{}.width"), (C, "{}.hits"), (TL, "len({})")):
            v = self.pick(kind)
            if v:
                opts.append(lambda v=v, tmpl=tmpl: tmpl.format(v))
        o = self.pick(O)
        if o:
            opts += [lambda: f"{o}.bump({r.randint(1, 3)})", lambda: f"{o}.double",
                     lambda: f"getattr({o}, 'extra', -1) if isinstance(getattr({o}, 'extra', -1), int) else 0"]
        if fr.has_state:
            opts += [lambda: "state.box.n", lambda: "len(state.out)", lambda: "len(state.log)"]
            if o and self.brk(fr):
                opts.append(lambda: f"{o}.report(state.buf)")
        return r.choice(opts)()

    def flt(self, fr):
        r = self.r
        s = self.scalar(fr)
        opts = [f"{r.choice([0.5, 1.5, -0.25, 2.0])}", f"float({self.integer(fr)}) / 3",
                f"math.sqrt(abs({self.integer(fr)}))" if self.rich() else f"float({self.integer(fr)}) * 0.5"]
        if self.brk(fr):
            opts += [f"{s}.item()", f"float({s})", f"round({s}.item(), 3)",
                     f"math.sqrt(abs({s}.item()))"]
        fv = self.pick(F)
        if fv:
            opts += [fv, f"({fv} + {self.integer(fr)} * 0.5)", f"({fv} * 2.0)", f"round({fv}, 2)"]
        return r.choice(opts)

    def value(self, fr):
        """Anything storable: ints, floats, strings, tensors, tuples."""
        r = self.r.random()
        if r < 0.3:
            return self.integer(fr)
        if r < 0.4:
            return self.flt(fr)
        if r < 0.5:
            return repr(self.r.choice(["a", "bb", "ccc", "k"]))
        if r < 0.8:
            return self.tensor(fr, 1)
        if r < 0.9:
            return f"({self.integer(fr)}, {self.tensor(fr, 2)})"
        return self.scalar(fr)

    def cond(self, fr):
        """A condition: on Python values (trace-time), on shapes, or on tensor data (a graph break)."""
        r = self.r
        a = self.tvar()
        opts = [
            lambda: f"{self.integer(fr)} > {r.randint(0, 4)}",
            lambda: f"{a}.shape[0] == {r.choice([3, 4])}",
            lambda: f"{self.integer(fr)} % 2 == 0",
            lambda: f"id({a}) == id({self.tvar()})",
            lambda: f"{a} is {self.tvar()}",
            lambda: f"len(str({self.integer(fr)})) > 1",
            lambda: f"{a}.requires_grad",
        ]
        if self.brk(fr):
            opts += [
                lambda: f"{self.scalar(fr)}.item() > {r.choice([0, 0.5, -0.5])}",
                lambda: f"{self.scalar(fr)} > 0",
                lambda: f"bool(({a} > 0).any())",
                lambda: f"float({self.scalar(fr)}) < {r.choice([0, 1.0])}",
            ]
        for kind, tmpl in ((L, "len({}) > 2"), (D, "'k' in {}"), (O, "hasattr({}, 'extra')"),
                           (R, "{}.a > 1"), (F, "{} > 0.1")):
            v = self.pick(kind)
            if v:
                opts.append(lambda v=v, tmpl=tmpl: tmpl.format(v))
        if fr.has_state:
            opts.append(lambda: f"len(state.out) > {r.randint(0, 3)}")
        return r.choice(opts)()
