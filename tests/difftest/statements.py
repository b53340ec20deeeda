"""The statements of generated programs (tensors, numbers, objects, containers, graph breaks,
control flow): mixed into ProgramGenerator (generator.py)."""
from expressions import Expressions
from scope import C, D, F, FN, I, L, O, P, R, S, T, TL, Z, Frame, Var, indent


class Statements(Expressions):
    # ------------------------------------------------------------------ statements
    def block(self, fr, n):
        self.scopes.append([])
        lines = []
        for k in range(n):
            if k and self.budget <= 0:
                break
            lines += self.statement(fr)
        self.scopes.pop()
        return lines or ["pass"]

    def nstmts(self, fr):
        return self.r.randint(1, 3 if fr.depth < 2 else 2)

    def statement(self, fr):
        self.budget -= 1
        r = self.r
        table = [
            (10, self.s_tensor_assign),
            (4, self.s_inplace),
            (2, self.s_input_inplace),
            (2, self.s_setitem),
            (3, self.s_scalar_assign),
            (3, self.s_int_assign),
            (2, self.s_float_assign),
            (2, self.s_aug_int),
            (3, self.s_reassign_tensor),
            (3, self.s_new_box),
            (5, self.s_box_ops),
            (3, self.s_rec),
            (2, self.s_spy),
            (1, self.s_lazy),
            (1, self.s_counter),
            (4, self.s_state_mut),
            (3, self.s_list),
            (3, self.s_list_ops),
            (2, self.s_tensor_list),
            (2, self.s_dict),
            (3, self.s_dict_ops),
            (2, self.s_tuple_unpack),
            (2, self.s_comprehension),
            (3 if self.profile == "all" else 0, self.s_closure),
            (2, self.s_global),
            (3, self.s_print),
            (2, self.s_tolist),
            (2, self.s_track),
            (2, self.s_del),
            (1, self.s_backward),
            (1, self.s_error_prone),
            (1 if self.profile != "linear" else 0, self.s_maybe_unbound),
        ]
        if fr.depth < 3 and self.budget > 1:
            table += [
                (4, self.s_if),
                (3, self.s_for),
                (1, self.s_while),
                (3 if self.profile != "linear" else 0, self.s_try),
                (2 if self.profile != "linear" else 0, self.s_with),
                (1, self.s_no_grad),
            ]
        if fr.in_loop:
            table += [(2, self.s_break_continue)]
        table += [(2, self.s_raise)]
        if not fr.inner and fr.depth > 0:
            table += [(1, self.s_return)]
        if fr.fn == "f" and fr.depth < 2 and not fr.inner and self.brk(fr):
            table += [(1, self.s_local_dataclass)]
        total = sum(w for w, _ in table)
        x = r.uniform(0, total)
        for w, fn in table:
            x -= w
            if x <= 0:
                out = fn(fr)
                if out is not None:
                    return out
                break
        return self.s_tensor_assign(fr)

    # --- tensors
    def s_tensor_assign(self, fr):
        name = self.fresh("t")
        e = self.tensor(fr)
        self.define(name, T, fr)
        return [f"{name} = {e}"]

    def s_reassign_tensor(self, fr):
        v = self.pick(T, fr, assignable=True)
        if not v:
            return None
        return [f"{v} = {self.tensor(fr, 1)}"]

    def s_inplace(self, fr):
        v = self.pick(T, fr)
        if not v:
            return None
        op = self.r.choice(["add_", "mul_", "sub_", "add_", "relu_", "clamp_"])
        if op == "relu_":
            return [f"{v}.relu_()"]
        if op == "clamp_":
            return [f"{v}.clamp_(-2, 2)"]
        arg = self.tensor(fr, 1) if self.chance(0.5) else self.num(fr)
        if op == "mul_" and self.chance(0.5):
            arg = self.r.choice(["0.5", "2", "-1"])
        return [f"{v}.{op}({arg})"]

    def s_input_inplace(self, fr):
        v = self.r.choice(["x", "y"]) if fr.fn == "f" and not fr.inner else self.tvar()
        op = self.r.choice([f"{v}.add_({self.num(fr)})", f"{v}.mul_(0.5)",
                            f"{v}[0].add_(1)", f"{v}.t()[1].mul_(2)",
                            f"{v}.copy_({self.tensor(fr, 1)})"])
        return [op]

    def s_setitem(self, fr):
        v = self.pick(T, fr)
        idx = self.r.choice(["0", "1", ":, 0", "1:, 1", "-1", "0, 0", "..., -1"])
        rhs = self.r.choice([self.num(fr), self.scalar(fr), f"{self.tvar()}[0, 0]"])
        if self.chance(0.3):
            return [f"{v}[{idx}] += {rhs}"]
        return [f"{v}[{idx}] = {rhs}"]

    def s_scalar_assign(self, fr):
        name = self.fresh("s")
        e = self.scalar(fr)
        self.define(name, S, fr)
        return [f"{name} = {e}"]

    def s_backward(self, fr):
        if not self.brk(fr):
            return None
        if not fr.has_state:
            return None
        return [f"({self.tvar()} * state.w).sum().backward()"]

    # --- Python numbers
    def s_int_assign(self, fr):
        name = self.fresh("i")
        e = self.integer(fr)
        self.define(name, I, fr)
        return [f"{name} = {e}"]

    def s_float_assign(self, fr):
        name = self.fresh("v")
        e = self.flt(fr)
        self.define(name, F, fr)
        return [f"{name} = {e}"]

    def s_aug_int(self, fr):
        v = self.pick(I, fr, assignable=True)
        if not v:
            return None
        op = self.r.choice(["+=", "-=", "*="])
        return [f"{v} {op} {self.integer(fr, 1)}", f"{v} = {v} % 11"] if op == "*=" else \
            [f"{v} {op} {self.integer(fr, 1)}"]

    # --- objects
    def s_new_box(self, fr):
        name = self.fresh("o")
        v = self.r.choice(["None", self.tvar(), self.tensor(fr, 1)])
        e = f"Box({self.integer(fr)}, {v})"
        if fr.has_state and self.chance(0.4):
            e = f"state.track('{name}', {e})"
        self.define(name, O, fr)
        return [f"{name} = {e}"]

    def s_box_ops(self, fr):
        objs = [v.name for v in self.visible(O)]
        if fr.has_state:
            objs += ["state.box"] * 2
        if not objs:
            return None
        o = self.r.choice(objs)
        r = self.r
        k = r.randint(1, 3)
        opts = [
            # read before write: the value read must be the old one
            lambda: self._rbw(fr, o),
            lambda: self._rbw(fr, o),
            lambda: [f"{o}.n += {k}"],
            lambda: [f"{o}.n = {self.integer(fr)}"],
            lambda: [f"{o}.v = {self.tensor(fr, 1)}"],
            lambda: [f"setattr({o}, 'extra', {self.value(fr)})"],
            lambda: [f"if hasattr({o}, 'extra'):", f"    del {o}.extra"],
            lambda: [f"{o}.extra = {self.integer(fr)}"],
            lambda: [f"{o}.tag = 'b{k}'"],
            lambda: self._getattr(fr, o),
            lambda: self._bump(fr, o),
            lambda: [f"{o}.n = {o}.double + {o}.n"],
            lambda: [f"{o}.v = {o}.scale({self.tvar()})"],
        ]
        out = r.choice(opts)()
        return out

    def _rbw(self, fr, o):
        old = self.fresh("old")
        lines = [f"{old} = {o}.n", f"{o}.n += {self.r.randint(1, 3)}"]
        if fr.has_state and self.chance(0.7):
            lines.append(f"state.out.append({old})")
        else:
            self.define(old, I, fr)
        if self.chance(0.3):
            oldv = self.fresh("oldv")
            lines += [f"{oldv} = {o}.v", f"{o}.v = {self.tensor(fr, 1)}"]
            if fr.has_state:
                lines.append(f"state.out.append({oldv})")
        return lines

    def _getattr(self, fr, o):
        name = self.fresh("i")
        self.define(name, I, fr)
        return [f"{name} = getattr({o}, 'n', 0) + (1 if hasattr({o}, 'extra') else 0)"]

    def _bump(self, fr, o):
        name = self.fresh("i")
        self.define(name, I, fr)
        return [f"{name} = {o}.bump({self.r.randint(1, 3)})"]

    def s_rec(self, fr):
        rs = self.visible(R)
        r = self.r
        if rs and self.chance(0.6):
            v = r.choice(rs).name
            opts = [
                [f"{v}.a = {self.integer(fr)}"],
                [f"{v}.a += 1"],
                [f"{v}.b = {self.tensor(fr, 1)}"],
                [f"{v}.tag = {v}.tag + 'x'"],
                [f"{self.fresh('old')} = {v}.a", f"{v}.a = {v}.a + 2"],
                # rebinding the name is only allowed in the function that defined it
                [f"{v} = dataclasses.replace({v}, a={self.integer(fr)})"]
                if v in [w.name for w in self.visible(R, fr, assignable=True)] else [f"{v}.a -= 1"],
            ]
            lines = r.choice(opts)
            if fr.has_state and self.chance(0.5):
                lines = lines + [f"state.out.append({v})"]
            return lines
        name = self.fresh("r")
        args = [self.integer(fr)]
        if self.chance(0.7):
            args.append(self.tensor(fr, 1) if self.chance(0.7) else self.value(fr))
        e = f"Rec({', '.join(args)})"
        if fr.has_state and self.chance(0.3):
            e = f"state.track('{name}', {e})"
        self.define(name, R, fr)
        lines = [f"{name} = {e}"]
        if self.chance(0.5):
            lines.append(f"{name}.a = {self.integer(fr)}")
        if fr.has_state and self.chance(0.4):
            lines.append(f"state.out.append({name})")
        return lines

    def s_local_dataclass(self, fr):
        cls = self.fresh("DC")
        name = self.fresh("r")
        lines = ["@dataclasses.dataclass", f"class {cls}:", "    a: int", "    b: object = None",
                 "    tag: str = 'l'", f"{name} = {cls}({self.integer(fr)}, {self.tensor(fr, 1)})",
                 f"{name}.a += {self.r.randint(1, 3)}"]
        self.define(name, R, fr)   # has .a, .b and .tag like Rec
        if fr.has_state:
            lines.append(f"state.out.append(({name}.a, {name}.tag))")
        return lines

    def s_spy(self, fr):
        if self.profile == "pure":
            return None
        ps = self.visible(P)
        if ps and self.chance(0.6):
            p = self.r.choice(ps).name
            return self.r.choice([
                [f"{p}.n = {p}.n + 1"],
                [f"{self.fresh('t')} = {self.tvar()} * {p}.n"],
                [f"{p}.m = {self.integer(fr)}"],
            ])
        name = self.fresh("p")
        lines = [f"{name} = Spy({self.integer(fr)})"]
        self.define(name, P, fr)
        if self.chance(0.15):
            # reads through the user-defined __getattribute__ around a write: each read must run it
            t = self.fresh("t")
            lines += [f"{name}.n = {name}.n + {self.r.randint(1, 3)}",
                      f"{t} = {self.tvar()} * {name}.n"]
            self.define(t, T, fr)
        return lines

    def s_lazy(self, fr):
        if self.profile == "pure":
            return None
        name = self.fresh("z")
        self.define(name, Z, fr)
        return [f"{name} = Lazy()"]

    def s_counter(self, fr):
        name = self.fresh("c")
        self.define(name, C, fr)
        return [f"{name} = Counter({self.r.randint(0, 3)})"]

    def s_state_mut(self, fr):
        if not fr.has_state:
            return None
        r = self.r
        key = r.choice(["'a'", "'b'", "'k'", "'t'"])
        opts = [
            lambda: [f"state.out.append({self.value(fr)})"],
            lambda: [f"state.log.append({self.integer(fr)})"],
            lambda: [f"state.d[{key}] = {self.value(fr)}"],
            lambda: [f"state.d.setdefault({key}, []).append({self.integer(fr)})"],
            lambda: [f"state.count = getattr(state, 'count', 0) + 1"],
            lambda: [f"state.box.v = {self.tensor(fr, 1)}"],
            lambda: [f"state.last = {self.value(fr)}"],
            lambda: [f"state.log.append(f\"n={{{self.integer(fr)}}} ok={{isinstance({self.tvar()}, torch.Tensor)}}\")"],
            lambda: [f"if state.out:", f"    state.log.append(state.out.pop())"],
        ]
        return r.choice(opts)()

    # --- containers
    def s_list(self, fr):
        name = self.fresh("l")
        items = [self.value(fr) for _ in range(self.r.randint(1, 3))]
        self.define(name, L, fr)
        return [f"{name} = [{', '.join(items)}]"]

    def s_list_ops(self, fr):
        ls = [v.name for v in self.visible(L)]
        if fr.fn == "f" and not fr.inner and self.profile != "pure":
            ls.append("g_list")
        if not ls:
            return None
        l = self.r.choice(ls)
        r = self.r
        opts = [
            lambda: [f"{l}.append({self.value(fr)})"],
            lambda: [f"{l}.extend([{self.integer(fr)}, {self.value(fr)}])"],
            lambda: [f"{l}.insert(0, {self.value(fr)})"],
            lambda: [f"if {l}:", f"    {l}[0] = {self.value(fr)}"],
            lambda: [f"if len({l}) > 1:", f"    {l}.pop()"],
            lambda: self._pop_into(fr, l),
            lambda: self._star_unpack(fr, l),
            lambda: [f"{l}[:] = {l}[::-1]"],
            lambda: [f"del {l}[0]"] if l != "g_list" else [f"{l}.clear()"],
            lambda: [f"{self.define(self.fresh('i'), I, fr)} = {l}.index({l}[-1]) if {l} else -1"],
        ]
        return r.choice(opts)()

    def _pop_into(self, fr, l):
        name = self.fresh("e")
        lines = [f"{name} = {l}.pop() if {l} else None"]
        if fr.has_state:
            lines.append(f"state.out.append({name})")
        return lines

    def _star_unpack(self, fr, l):
        if not self.rich():
            return None
        a, rest = self.fresh("a"), self.fresh("rest")
        self.scopes.append([])
        inner = [f"{a}, *{rest} = {l}", f"{self.define(self.fresh('i'), I, fr)} = len({rest})"]
        if fr.has_state:
            inner.append(f"state.out.append({rest})")
        self.scopes.pop()
        return [f"if {l}:"] + indent(inner)

    def s_tensor_list(self, fr):
        tls = self.visible(TL)
        if tls and self.chance(0.5):
            tl = self.r.choice(tls).name
            return self.r.choice([
                [f"{tl}.append({self.tensor(fr, 1)})"],
                [f"if len({tl}) > 1:", f"    {tl}.pop(0)"],
                [f"{tl}[0] = {self.tensor(fr, 1)}"],
            ])
        name = self.fresh("tl")
        if self.chance(0.5) and self.rich():
            line = f"{name} = [{self.tvar()} * k for k in range({self.r.randint(1, 3)})]"
        else:
            line = f"{name} = [{self.tensor(fr, 1)}, {self.tvar()}]"
        self.define(name, TL, fr)
        return [line]

    def s_dict(self, fr):
        name = self.fresh("d")
        items = [f"'{k}': {self.value(fr)}" for k in self.r.sample(["a", "b", "k", "z"], self.r.randint(1, 3))]
        self.define(name, D, fr)
        return [f"{name} = {{{', '.join(items)}}}"]

    def s_dict_ops(self, fr):
        ds = [v.name for v in self.visible(D)]
        if fr.has_state:
            ds.append("state.d")
        if not ds:
            return None
        d = self.r.choice(ds)
        key = self.r.choice(["'a'", "'b'", "'k'", "'z'"])
        opts = [
            lambda: [f"{d}[{key}] = {self.value(fr)}"],
            lambda: [f"if {key} in {d}:", f"    del {d}[{key}]"],
            lambda: [f"{d}.update({{{key}: {self.value(fr)}}})"],
            lambda: [f"{d}.pop({key}, None)"],
            lambda: self._dict_iter(fr, d),
            lambda: [f"{self.define(self.fresh('d'), D, fr)} = {{k: v for k, v in {d}.items() if k != {key}}}"],
            lambda: [f"{self.define(self.fresh('l'), L, fr)} = list({d}.keys())"],
        ]
        return self.r.choice(opts)()

    def _dict_iter(self, fr, d):
        k = self.fresh("k")
        lines = [f"for {k} in list({d}):"]
        body = [f"if isinstance({d}[{k}], torch.Tensor):",
                f"    {d}[{k}] = {d}[{k}] * 2",
                "else:", f"    {d}[{k}] = ({d}[{k}], {k})"]
        return lines + indent(body)

    def s_tuple_unpack(self, fr):
        r = self.r
        if self.chance(0.5):
            a, b = self.fresh("t"), self.fresh("t")
            e1, e2 = self.tensor(fr, 1), self.tensor(fr, 1)
            self.define(a, T, fr)
            self.define(b, T, fr)
            if self.chance(0.3):
                return [f"{a}, {b} = {e1}, {e2}", f"{a}, {b} = {b}, {a}"]
            return [f"{a}, {b} = ({e1}, {e2})"]
        tu, h, rest = self.fresh("tu"), self.fresh("i"), self.fresh("rest")
        lines = [f"{tu} = ({self.integer(fr)}, {self.tensor(fr, 1)}, {self.integer(fr)})"]
        if self.rich():
            lines.append(f"{h}, *{rest} = {tu}")
            self.define(rest, L, fr)
        else:
            t2 = self.fresh("t")
            lines.append(f"{h}, {t2}, {rest} = {tu}")
            self.define(t2, T, fr)
            self.define(rest, I, fr)
        self.define(h, I, fr)
        return lines

    def s_comprehension(self, fr):
        r = self.r
        name = self.fresh("l")
        k = r.randint(1, 4)
        opts = [
            f"[i * i for i in range({k}) if i % 2 == 0]",
            f"sorted([{self.integer(fr)}, {self.integer(fr)}, {k}])",
            f"list(zip(range({k}), 'abcd'))",
        ]
        if self.rich():   # comprehensions over locals make them cell variables
            opts += [f"[{self.tvar()}[i].sum() for i in range(min({k}, 3))]",
                     f"[(i, {self.integer(fr)}) for i in range({k})]"]
        self.define(name, L, fr)
        return [f"{name} = {r.choice(opts)}"]

    def s_closure(self, fr):
        if fr.inner or fr.depth > 1:
            return None
        r = self.r
        cnt, fn = self.fresh("cnt"), self.fresh("inner")
        lines = [f"{cnt} = {r.randint(0, 2)}", f"def {fn}(t):", f"    nonlocal {cnt}", f"    {cnt} += 1"]
        # the inner function's own scope: t, plus read-only captured variables of f
        captured = self.tvar()
        self.scopes.append([Var("t", T, fn)])
        ifr = Frame(fn, has_state=False, in_loop=False, depth=fr.depth + 1, inner=True)
        body = []
        for _ in range(r.randint(0, 2)):
            body += self.statement(ifr)
        self.scopes.pop()
        lines += indent(body)
        lines.append(f"    return t * {cnt} + {captured}")
        self.define(fn, FN, fr, assignable=False)
        self.define(cnt, I, fr, assignable=False)
        out = self.fresh("t")
        lines.append(f"{out} = {fn}({self.tvar()})")
        self.define(out, T, fr)
        if fr.has_state and self.chance(0.5):
            lines.append(f"state.log.append({cnt})")
        if self.chance(0.3):
            lam = self.fresh("lam")
            self.define(lam, FN, fr, assignable=False)
            lines.append(f"{lam} = lambda t: t.relu() + {self.tvar()}")
        return lines

    def s_global(self, fr):
        if fr.fn != "f" or fr.inner or self.profile == "pure":
            return None
        r = self.r
        opts = [
            lambda: ["g_n += 1"],
            lambda: [f"g_n = g_n + {self.integer(fr)}"],
            lambda: [f"g_list.append({self.integer(fr)})"],
            lambda: [f"g_t = {self.tensor(fr, 1)}"],
            lambda: self._read_g_t(fr),
            lambda: ["g_list.append(g_n)"],
        ]
        return r.choice(opts)()

    def _read_g_t(self, fr):
        a = self.tvar()
        name = self.fresh("t")
        self.define(name, T, fr)
        # g_t may hold a tensor of an earlier call's shape
        return [f"{name} = g_t + 1 if g_t is not None and g_t.shape == {a}.shape else {a}"]

    # --- graph breaks
    def s_print(self, fr):
        if not self.brk(fr):
            return None
        if not fr.has_state:
            return None
        r = self.r
        a = self.tvar()
        what = r.choice([
            f"'p', {self.integer(fr)}",
            f"round({self.scalar(fr)}.item(), 3)",
            f"tuple({a}.shape)",
            f"{a}.shape",
            f"'len', len(state.out)",
            f"[round(v, 2) for v in {a}[0].tolist()]",
            f"{a}.dtype, {a}.requires_grad",
        ])
        return [f"print({what}, file=state.buf)"]

    def s_tolist(self, fr):
        if not self.brk(fr):
            return None
        name = self.fresh("l")
        a = self.tvar()
        self.define(name, L, fr)
        return [self.r.choice([f"{name} = {a}.tolist()", f"{name} = {a}[0].tolist()",
                               f"{name} = [{a}.sum().item(), len({a}.tolist())]",
                               f"{name} = list({a}.shape)"])]

    def s_track(self, fr):
        if not self.brk(fr):
            return None
        if not fr.has_state:
            return None
        cands = self.visible(O) + self.visible(R) + self.visible(T) + self.visible(P)
        if not cands:
            return None
        v = self.r.choice(cands).name
        return [f"state.track('{v}', {v})"]

    def s_del(self, fr):
        # Only names of this block: deleting in a nested block would leave the name unbound after it.
        mine = [v for v in self.scopes[-1] if v.fn == fr.fn and v.assignable
                and v.name not in ("x", "y", "n", "a", "b", "t")]
        if not mine:
            return None
        v = self.r.choice(mine)
        self.scopes[-1].remove(v)
        if self.chance(0.3) and v.kind in (O, R, P, L, D):
            # drop the object and bind the name to a new one
            self.scopes[-1].append(v)
            return [f"{v.name} = {self._rebuild(v, fr)}"]
        return [f"del {v.name}"]

    def s_maybe_unbound(self, fr):
        """A local bound on one branch only, then read or deleted: UnboundLocalError (caught)."""
        u = self.fresh("u")
        use = self.r.choice([f"del {u}", f"{self.fresh('i')} = {u} + 1"])
        handler = f"state.log.append('unbound {u}')" if fr.has_state else "pass"
        return [f"if {self.cond(fr)}:", f"    {u} = {self.integer(fr)}",
                "try:", f"    {use}", "except UnboundLocalError:", f"    {handler}"]

    def _rebuild(self, v, fr):
        return {O: f"Box({self.integer(fr)})", R: f"Rec({self.integer(fr)})", P: "Spy(0)",
                L: "[]", D: "{}"}[v.kind]

    def s_error_prone(self, fr):
        if not self.brk(fr):
            return None
        r = self.r
        name = self.fresh("i")
        opts = [
            f"{name} = [1, 2, 3][{self.integer(fr)}]",
            f"{name} = {{'a': 1, 'b': 2}}[{r.choice(['a', 'b', 'c'])!r}]",
            f"{name} = 12 // ({self.integer(fr)} - {r.randint(0, 3)})",
            f"{name} = int({self.tvar()}[{r.choice([2, 3, 4])}, 0] > 0)",
        ]
        self.define(name, I, fr)
        return [r.choice(opts)]

    # --- control flow
    def s_if(self, fr):
        c = self.cond(fr)
        body = self.block(fr.child(), self.nstmts(fr))
        lines = [f"if {c}:"] + indent(body)
        if self.chance(0.5):
            lines += ["else:"] + indent(self.block(fr.child(), self.nstmts(fr)))
        return lines

    def s_for(self, fr):
        r = self.r
        i = self.fresh("i")
        k = r.randint(1, 4)
        self.scopes.append([Var(i, I, fr.fn, assignable=False)])
        it = r.choice([f"range({k})", f"range({k})", f"range(1, {k + 1})"])
        body = self.block(fr.child(in_loop=True), self.nstmts(fr))
        self.scopes.pop()
        lines = [f"for {i} in {it}:"] + indent(body)
        if self.chance(0.15):
            lines += ["else:"] + indent(self.block(fr.child(), 1))
        if self.chance(0.3):
            # a loop over a container
            e = self.fresh("e")
            tl = self.pick(TL)
            src = tl if tl else f"[{self.tvar()}, {self.tvar()}]"
            self.scopes.append([Var(e, T, fr.fn, assignable=False)])
            body2 = self.block(fr.child(in_loop=True), 1)
            self.scopes.pop()
            lines += [f"for {e} in list({src}):"] + indent(body2)
        return lines

    def s_while(self, fr):
        w = self.fresh("w")
        k = self.r.randint(1, 3)
        self.scopes.append([Var(w, I, fr.fn, assignable=False)])
        body = self.block(fr.child(in_loop=True), self.nstmts(fr))
        self.scopes.pop()
        return [f"{w} = 0", f"while {w} < {k}:", f"    {w} += 1"] + indent(body)

    def s_break_continue(self, fr):
        return [f"if {self.cond(fr)}:", "    " + self.r.choice(["break", "continue"])]

    def s_try(self, fr):
        r = self.r
        lines = ["try:"] + indent(self.block(fr.child(), self.nstmts(fr) + 1))
        handlers = 0
        if self.chance(0.8):
            e = self.fresh("e")
            self.scopes.append([])
            body = []
            if fr.has_state:
                body.append(f"state.log.append(('caught', {e}.code, str({e})))")
            body += self.block(fr.child(), r.randint(0, 1)) if self.chance(0.5) else []
            self.scopes.pop()
            lines += [f"except MyError as {e}:"] + indent(body or ["pass"])
            handlers += 1
        if self.chance(0.5):
            e = self.fresh("e")
            body = [f"state.log.append(type({e}).__name__)"] if fr.has_state else ["pass"]
            lines += [f"except (IndexError, KeyError, ZeroDivisionError) as {e}:"] + indent(body)
            handlers += 1
        if self.chance(0.15):
            e = self.fresh("e")
            body = [f"state.log.append(('exc', type({e}).__name__))"] if fr.has_state else ["pass"]
            if self.chance(0.3):
                body.append("raise")
            lines += [f"except Exception as {e}:"] + indent(body)
            handlers += 1
        if handlers and self.chance(0.3):
            lines += ["else:"] + indent(self.block(fr.child(), 1))
        if not handlers or self.chance(0.4):
            lines += ["finally:"] + indent(self.block(fr.child(), self.nstmts(fr)))
        return lines

    def s_raise(self, fr):
        r = self.r
        exc = r.choice([f"MyError({self.integer(fr)})", f"MyError({r.randint(0, 9)}, 'bad')",
                        "ValueError('v')", f"KeyError({r.choice(['a', 'b'])!r})"])
        if self.chance(0.8):
            return [f"if {self.cond(fr)}:", f"    raise {exc}"]
        if fr.depth == 0:
            return [f"if {self.cond(fr)}:", f"    raise {exc}"]
        return [f"raise {exc}"]

    def s_return(self, fr):
        return [f"if {self.cond(fr)}:", f"    return {self.ret_expr(fr)}"]

    def s_with(self, fr):
        name = self.fresh("w")
        if not fr.has_state:
            return None
        swallow = self.chance(0.3)
        head = f"with Ctx(state, '{name}'{', swallow=True' if swallow else ''}) as {name}:"
        self.scopes.append([Var(name, "CTX", fr.fn, assignable=False)])
        body = self.block(fr.child(), self.nstmts(fr))
        self.scopes.pop()
        return [head] + indent(body)

    def s_no_grad(self, fr):
        body = self.block(fr.child(), self.nstmts(fr))
        return ["with torch.no_grad():"] + indent(body)

    # ------------------------------------------------------------------ functions
