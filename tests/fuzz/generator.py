"""Random but valid Python programs over tensors and Python values, as source text.

A program is a module with a few globals (``G`` an int, ``GL`` a list, ``GT`` a 0-dim tensor),
helper functions ``h0..hk`` (each may call the ones before it) and the entry point
``fn(x, y, n, lst)``: ``x``/``y`` float tensors of one shape ``(s,)``, ``n`` an int, ``lst`` a
non-empty list of floats. Every generated program runs in eager Python without raising for
any such inputs (division and indexing are kept safe), so a difference between eager and
compiled runs is always the compiler's.

The generator tracks, for each tensor variable, its rank (0 or 1) so that in-place ops and
augmented assignments never broadcast into a smaller tensor, and it scopes variables defined
inside a block to that block, so no path reads an unbound name.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .call_families import CALL_FAMILIES
from .data_families import DATA_FAMILIES
from .families import CONSTRUCTS, FAMILIES, Family
from .flow_families import FLOW_FAMILIES
from .iter_families import ITER_CONSTRUCTS, ITER_FAMILIES
from .object_families import LATE_FAMILIES as _OBJECT_FAMILIES

# New ones go at the end of LATE_FAMILIES (its order, not sorted: each family's draws come from
# one shared stream, so a family added later leaves the earlier ones' choices as they were).
LATE_FAMILIES = {
    **_OBJECT_FAMILIES, **FLOW_FAMILIES, **DATA_FAMILIES, **CALL_FAMILIES, **ITER_FAMILIES,
}

__all__ = [
    "FAMILY_RATE",
    "KNOWN_BUG_FEATURES",
    "Program",
    "generate_inputs",
    "generate_program",
]

_UNARY = [
    "torch.sin({})",
    "torch.cos({})",
    "torch.tanh({})",
    "torch.relu({})",
    "torch.sigmoid({})",
    "{}.abs()",
    "torch.clamp({}, -2.0, 2.0)",
    "{}.neg()",
    "torch.exp(torch.clamp({}, max=2.0))",
    "torch.sign({})",  # NaN -> 0 and -0.0 -> +0.0 in eager (inductor_lite once kept both)
    "torch.round({}, decimals=1)",  # an overload its packet's lowering did not take
]
_REDUCE = ["{}.sum()", "{}.mean()", "{}.amax()", "torch.sum({})"]
_TBIN = ["+", "-", "*"]


@dataclass
class Program:
    """One generated program: its source and where it came from."""

    source: str
    seed: int
    features: list[str] = field(default_factory=list)


@dataclass
class _Scope:
    tensors: dict[str, int]  # name -> rank (0 or 1)
    ints: list[str]
    in_main: bool
    helpers: list[str]
    depth: int = 0
    iterating_lst: bool = False  # appending to lst while iterating it would never end


class _Gen:
    def __init__(self, rng: random.Random, avoid: frozenset[str] = frozenset()) -> None:
        self.avoid = avoid
        self.rng = rng
        self.counter = 0
        self.features: set[str] = set()

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def const(self) -> str:
        return self.rng.choice(["0.5", "1.0", "2.0", "-1.5", "0.25", "3.0"])

    def iconst(self) -> str:
        return str(self.rng.randint(0, 5))

    # ---- expressions -------------------------------------------------------------------
    def texpr(self, sc: _Scope, max_rank: int, depth: int = 0) -> tuple[str, int]:
        """A tensor expression of rank at most ``max_rank``, and its exact rank."""
        r = self.rng.random()
        leaves = [(n, rank) for n, rank in sc.tensors.items() if rank <= max_rank]
        if depth >= 2 or r < 0.25:
            if leaves and self.rng.random() < 0.85:
                return self.rng.choice(leaves)
            if self.rng.random() < 0.5:
                self.features.add("global_read")
                return "GT", 0
            return self._reduce(sc, depth)
        choice = self.rng.randrange(12)
        if choice <= 2:
            a, ra = self.texpr(sc, max_rank, depth + 1)
            b, rb = self.texpr(sc, max_rank, depth + 1)
            return f"({a} {self.rng.choice(_TBIN)} {b})", max(ra, rb)
        if choice == 3:
            a, ra = self.texpr(sc, max_rank, depth + 1)
            return f"({a} {self.rng.choice(_TBIN)} {self.const()})", ra
        if choice == 4:
            a, ra = self.texpr(sc, max_rank, depth + 1)
            return self.rng.choice(_UNARY).format(a), ra
        if choice == 5:
            a, ra = self.texpr(sc, max_rank, depth + 1)
            b, rb = self.texpr(sc, max_rank, depth + 1)
            text = self.rng.choice(
                [
                    f"({a} / ({b}.abs() + 1.0))",
                    f"torch.maximum({a}, {b})",
                    f"torch.where({a} > {b}, {a}, {b})",
                ]
            )
            return text, max(ra, rb)
        if choice == 6:
            return self._reduce(sc, depth)
        if choice == 7:
            self.features.add("tensor_times_int")
            a, ra = self.texpr(sc, max_rank, depth + 1)
            return f"({a} * {self.iexpr(sc, depth + 1)})", ra
        if choice == 8 and sc.helpers and max_rank >= 1:
            self.features.add("helper_call")
            # helpers are written for rank-1 arguments and return rank-1 tensors
            helper = self.rng.choice(sc.helpers)
            return f"{helper}({self.rank1(sc, depth + 1)}, {self.iexpr(sc, depth + 1)})", 1
        if choice == 10:
            self.features.add("view")
            ones = [n for n, r in sc.tensors.items() if r == 1]
            if ones and max_rank >= 1:
                base = self.rng.choice(ones)
                return self.rng.choice(
                    [
                        f"{base}.view(-1)",
                        f"{base}.reshape(-1)",
                        f"{base}.unsqueeze(0).squeeze(0)",
                        f"{base}[:]",
                        f"{base}.t()",
                    ]
                ), 1
            return self.rng.choice(leaves) if leaves else ("GT", 0)
        if choice == 11:
            self.features.add("dtype")
            a, ra = self.texpr(sc, max_rank, depth + 1)
            b, rb = self.texpr(sc, max_rank, depth + 1)
            options = [
                (f"({a} > {b}).float()", max(ra, rb)),
                (f"{a}.double().float()", ra),
                (f"({a} >= 0).sum().float()", 0),
                (f"{a}.to(torch.float64).sum().to(torch.float32)", 0),
            ]
            return self.rng.choice(options)
        if choice == 9 and sc.in_main:
            self.features.add("list_read")
            a, ra = self.texpr(sc, max_rank, depth + 1)
            # sum() of several floats: CPython 3.12+ compensates, a left fold of + differs in
            # the last bits (session 6's 10k run, program 5006)
            return self.rng.choice(
                [f"({a} + lst[0])", f"({a} * sum([*lst, 0.1, 0.2]))", f"({a} - lst[-1])"]
            ), ra
        return self.rng.choice(leaves) if leaves else ("GT", 0)

    def rank1(self, sc: _Scope, depth: int) -> str:
        text, rank = self.texpr(sc, 1, depth)
        if rank == 1:
            return text
        ones = [n for n, r in sc.tensors.items() if r == 1]
        return f"({text} + {self.rng.choice(ones)})"

    def _reduce(self, sc: _Scope, depth: int) -> tuple[str, int]:
        return self.rng.choice(_REDUCE).format(self.texpr(sc, 1, depth + 1)[0]), 0

    def iexpr(self, sc: _Scope, depth: int = 0) -> str:
        if depth >= 2 or self.rng.random() < 0.35:
            pool = [*sc.ints, self.iconst()]
            if sc.in_main:
                pool += ["len(lst)", "x.shape[0]"]
            if self.rng.random() < 0.1:
                self.features.add("global_read")
                pool.append("G")
            return self.rng.choice(pool)
        choice = self.rng.randrange(5)
        a = self.iexpr(sc, depth + 1)
        b = self.iexpr(sc, depth + 1)
        if choice == 0:
            return f"({a} + {b})"
        if choice == 1:
            return f"({a} - {b})"
        if choice == 2:
            return f"(({a} * {b}) % 11)"
        if choice == 3:
            return f"({a} // {self.rng.randint(1, 3)})"
        return self.rng.choice([f"min({a}, {b})", f"max({a}, {b})", f"abs({a})"])

    # ---- statements --------------------------------------------------------------------
    def block(self, sc: _Scope, n: int, ind: str) -> list[str]:
        inner = _Scope(
            dict(sc.tensors), list(sc.ints), sc.in_main, sc.helpers, sc.depth + 1, sc.iterating_lst
        )
        lines: list[str] = []
        for _ in range(n):
            lines += self.stmt(inner, ind)
        return lines or [f"{ind}pass"]

    def stmt(self, sc: _Scope, ind: str) -> list[str]:
        rng = self.rng
        kinds = (
            ["tassign"] * 6
            + ["iassign"] * 3
            + [
                "augassign",
                "inplace",
                "inplace",
                "setitem",
                "slice_inplace",
                "alias",
                "for_range",
                "for_list",
                "if_const",
                "if_tensor",
                "global_write",
                "print",
                "try",
                "with",
                "container",
                "closure",
                "while",
                "list_append",
            ]
        )
        if sc.in_main:
            kinds += ["early_return"]
        if sc.depth >= 2:
            kinds = [
                k
                for k in kinds
                if k
                in {
                    "tassign",
                    "iassign",
                    "augassign",
                    "inplace",
                    "global_write",
                    "print",
                    "early_return",
                }
            ]
        kind = rng.choice(kinds)
        if kind == "tassign":
            name = self.fresh("t")
            text, rank = self.texpr(sc, 1)
            sc.tensors[name] = rank
            return [f"{ind}{name} = {text}"]
        if kind == "iassign":
            name = self.fresh("i")
            line = f"{ind}{name} = {self.iexpr(sc)}"
            sc.ints.append(name)
            return [line]
        if kind == "augassign":
            self.features.add("augassign")
            target = rng.choice(list(sc.tensors))
            return [
                f"{ind}{target} {rng.choice(['+=', '-=', '*='])} "
                f"{self.texpr(sc, sc.tensors[target])[0]}"
            ]
        if kind == "inplace":
            self.features.add("inplace")
            target = rng.choice(list(sc.tensors))
            method = rng.choice(
                [
                    f"add_({self.texpr(sc, sc.tensors[target])[0]})",
                    "mul_(0.5)",
                    "clamp_(-1.0, 1.0)",
                    f"sub_({self.const()})",
                    "relu_()",
                ]
            )
            return [f"{ind}{target}.{method}"]
        if kind == "slice_inplace":
            ones = [n for n, r in sc.tensors.items() if r == 1]
            self.features.add("view_inplace")
            target = rng.choice(ones)
            return [
                f"{ind}{target}[{rng.choice(['1:', ':1', '::2', ':'])}]."
                f"{rng.choice(['mul_(2.0)', 'add_(1.0)', 'zero_()', 'neg_()'])}"
            ]
        if kind == "alias":
            self.features.add("alias")
            target = rng.choice(list(sc.tensors))
            name = self.fresh("t")
            sc.tensors[name] = sc.tensors[target]
            return [
                f"{ind}{name} = {target}",
                f"{ind}{name}.{rng.choice(['mul_(2.0)', 'add_(1.0)', 'sub_(0.5)'])}",
            ]
        if kind == "setitem":
            ones = [n for n, r in sc.tensors.items() if r == 1]
            if not ones:
                return self.stmt(sc, ind)
            self.features.add("setitem")
            target = rng.choice(ones)
            return [f"{ind}{target}[0] = {self.texpr(sc, 0)[0]}"]
        if kind == "for_range":
            self.features.add("for_range")
            var = self.fresh("k")
            body_sc = _Scope(
                dict(sc.tensors),
                [*sc.ints, var],
                sc.in_main,
                sc.helpers,
                sc.depth,
                sc.iterating_lst,
            )
            bound = rng.choice([self.iconst(), "3", "len(lst)" if sc.in_main else "2"])
            return [
                f"{ind}for {var} in range({bound}):",
                *self.block(body_sc, rng.randint(1, 3), ind + "    "),
            ]
        if kind == "for_list":
            self.features.add("for_list")
            var = self.fresh("v")
            it = "lst" if sc.in_main and rng.random() < 0.6 else "[1.0, -2.0, 0.5]"
            target = rng.choice(list(sc.tensors))
            body_sc = _Scope(
                dict(sc.tensors),
                list(sc.ints),
                sc.in_main,
                sc.helpers,
                sc.depth,
                sc.iterating_lst or it == "lst",
            )
            return [
                f"{ind}for {var} in {it}:",
                f"{ind}    {target} = {target} * {var}"
                if rng.random() < 0.5
                else f"{ind}    {target} = {target} + {var}",
                *self.block(body_sc, rng.randint(0, 2), ind + "    "),
            ]
        if kind == "if_const":
            self.features.add("if_const")
            return [
                f"{ind}if {self.iexpr(sc)} > {self.iconst()}:",
                *self.block(sc, rng.randint(1, 3), ind + "    "),
                f"{ind}else:",
                *self.block(sc, rng.randint(1, 2), ind + "    "),
            ]
        if kind == "if_tensor":
            self.features.add("if_tensor")
            cond = rng.choice(
                [f"{self.texpr(sc, 1)[0]}.sum() > 0", f"({self.texpr(sc, 0)[0]} < 0.5).all()"]
            )
            return [
                f"{ind}if {cond}:",
                *self.block(sc, rng.randint(1, 2), ind + "    "),
                f"{ind}else:",
                *self.block(sc, rng.randint(1, 2), ind + "    "),
            ]
        if kind == "global_write":
            self.features.add("global_write")
            return [
                rng.choice(
                    [
                        f"{ind}G = G + {self.iexpr(sc)}",
                        f"{ind}GL.append({self.iexpr(sc)})",
                        f"{ind}GT = GT + {self.texpr(sc, 0)[0]}",
                    ]
                )
            ]
        if kind == "print":
            self.features.add("print")
            return [
                rng.choice(
                    [
                        f"{ind}print('p', {self.iexpr(sc)})",
                        f"{ind}print('shape', {rng.choice(list(sc.tensors))}.shape)",
                        f"{ind}print('pos', bool({self.texpr(sc, 1)[0]}.sum() > 0))",
                    ]
                )
            ]
        if kind == "try":
            self.features.add("try")
            raising = rng.choice(
                [
                    "",
                    f"{ind}    raise ValueError('boom')",
                    f"{ind}    {self.fresh('z')} = 1 // ({self.iexpr(sc)} * 0)",
                ]
            )
            if "zero_division_in_try" in self.avoid and "//" in raising:
                raising = f"{ind}    raise ValueError('boom')"
            body = self.block(sc, rng.randint(1, 2), ind + "    ")
            return [
                f"{ind}try:",
                *body,
                *([raising] if raising else []),
                f"{ind}except (ValueError, ZeroDivisionError):",
                *self.block(sc, rng.randint(1, 2), ind + "    "),
            ]
        if kind == "with":
            self.features.add("with_no_grad")
            return [f"{ind}with torch.no_grad():", *self.block(sc, rng.randint(1, 2), ind + "    ")]
        if kind == "container":
            self.features.add("container")
            a, b = (
                rng.sample(list(sc.tensors), 2)
                if len(sc.tensors) > 1
                else [next(iter(sc.tensors))] * 2
            )
            c = self.fresh("c")
            out = self.fresh("t")
            i = self.iexpr(sc)
            form = rng.randrange(4)
            sc.tensors[out] = sc.tensors[b] if form == 2 else max(sc.tensors[a], sc.tensors[b])
            if form == 0:
                return [
                    f"{ind}{c} = [{a}, {b}]",
                    f"{ind}{c}.append({a} * 2.0)",
                    f"{ind}{out} = {c}[0] + {c}[-1] - {c}[1]",
                ]
            if form == 1:
                return [
                    f"{ind}{c} = {{'a': {a}, 'b': {b}, 'n': {i}}}",
                    f"{ind}{out} = {c}['a'] * {c}['n'] + {c}['b']",
                ]
            if form == 2:
                return [f"{ind}{c} = ({a}, {b})", f"{ind}{self.fresh('u')}, {out} = {c}"]
            return [f"{ind}{c} = [{a}, {b}, {a}]", f"{ind}{out} = sum({c})"]
        if kind == "closure":
            self.features.add("closure")
            fname = self.fresh("inner")
            cap_t = rng.choice(list(sc.tensors))
            cap_i = rng.choice(sc.ints) if sc.ints else "2"
            out = self.fresh("t")
            arg, arg_rank = self.texpr(sc, 1)
            lines = [
                f"{ind}def {fname}(a):",
                f"{ind}    return a * {cap_i} + {cap_t}",
                f"{ind}{out} = {fname}({arg})",
            ]
            sc.tensors[out] = max(arg_rank, sc.tensors[cap_t])
            return lines
        if kind == "while":
            self.features.add("while")
            w = self.fresh("w")
            target = rng.choice(list(sc.tensors))
            return [
                f"{ind}{w} = 0",
                f"{ind}while {w} < {rng.randint(1, 3)}:",
                f"{ind}    {target} = {target} + {w}",
                f"{ind}    {w} += 1",
            ]
        if kind == "list_append":
            if not sc.in_main or sc.iterating_lst:
                return self.stmt(sc, ind)
            self.features.add("input_list_mutation")
            return [f"{ind}lst.append({rng.choice(['0.5', '1.0', '-1.0'])})"]
        if kind == "early_return":
            self.features.add("early_return")
            return [
                f"{ind}if {self.iexpr(sc)} > {self.iconst()}:",
                f"{ind}    return {self.ret(sc)}",
            ]
        raise AssertionError(kind)

    def ret(self, sc: _Scope) -> str:
        names = list(sc.tensors)
        picked = self.rng.sample(names, min(len(names), self.rng.randint(1, 3)))
        if sc.ints and self.rng.random() < 0.5:
            picked.append(self.rng.choice(sc.ints))
        return "(" + ", ".join(picked) + ",)"


KNOWN_BUG_FEATURES = {
    # regressions/test_division_by_zero_caught_in_try_eager.py: an exception raised by Python
    # code at trace time inside try/except escaped the compiled call (fixed by symbolic_vm
    # 4e54a4f; kept so old campaigns can be rerun the same way).
    "zero_division_in_try": "1 // 0 inside a try block",
    # issue 18 item 20: compiling draws from the global RNG, so the state after a call differs
    "rng_state": "comparing the global RNG state after each call (the program sets "
    "CHECK_RNG_STATE = False)",
    **{f"family:{name}": f"the {name} construct family (families.py)" for name in FAMILIES},
    **{f"family:{name}": f"the {name} construct family (object_families.py, flow_families.py, "
       "data_families.py, call_families.py, iter_families.py)" for name in LATE_FAMILIES},
    **CONSTRUCTS,
    **ITER_CONSTRUCTS,
}

# The share of programs built around construct families (issue 18's bug classes).
FAMILY_RATE = 0.5
# Families added later are drawn apart, each with its own rate and random stream, so programs
# of the earlier families stay as they were for every seed (recorded runs can be rerun) and the
# CI slice's cost grows only by the programs that draw a late family.
LATE_FAMILY_RATE = 0.06
# session 9's families at half the rate: about 9 programs each in the CI slice's 300; session
# 10's at 2% (about 6 each), session 12's at 0.5% (about 2 each: the CI slice's cost stays
# about the same; `--families iter_mutation,star_calls` runs them alone)
LATE_RATES = {name: LATE_FAMILY_RATE if name in _OBJECT_FAMILIES
              else 0.03 if name in FLOW_FAMILIES else 0.005 if name in ITER_FAMILIES
              else 0.02 for name in LATE_FAMILIES}
ALL_FAMILIES = {**FAMILIES, **LATE_FAMILIES}


def _pick_families(rng: random.Random, avoid: frozenset[str], seed: int) -> list[Family]:
    picked: list[Family] = []
    late = random.Random(seed * 7919 + 17)
    for slot, name in enumerate(LATE_FAMILIES):
        fam_seed = late.random()
        if late.random() < LATE_RATES[name] and f"family:{name}" not in avoid:
            picked.append(LATE_FAMILIES[name](random.Random(fam_seed), f"fl{slot}_", avoid))
    if rng.random() >= FAMILY_RATE:
        return picked
    names = sorted(FAMILIES)
    for slot in range(rng.choice([1, 1, 2])):
        name = rng.choice(names)
        fam_rng = random.Random(rng.random())  # avoiding one keeps the others' choices
        if f"family:{name}" not in avoid:
            picked.append(FAMILIES[name](fam_rng, f"f{slot}_", avoid))
    return picked


def generate_program(
    seed: int, avoid: frozenset[str] = frozenset(), families: list[str] | None = None
) -> Program:
    """The program for ``seed`` (the same seed always gives the same source).

    ``avoid`` names KNOWN_BUG_FEATURES to leave out (the random choices stay the same, so a
    program differs only where such a feature would have been). ``families`` forces these
    construct families instead of a random pick (tests).
    """
    unknown = avoid - KNOWN_BUG_FEATURES.keys()
    if unknown:
        raise ValueError(f"unknown features to avoid: {sorted(unknown)}")
    rng = random.Random(seed)
    gen = _Gen(rng, avoid)
    fams = _pick_families(rng, avoid, seed)
    if families is not None:
        fams = [
            ALL_FAMILIES[name](random.Random(seed + i), f"f{i}_", avoid)
            for i, name in enumerate(families)
        ]
    lines = ["import torch", "", "G = 0", "GL = []", "GT = torch.tensor(0.5)", ""]
    if "rng_state" in avoid:
        lines.insert(-1, "CHECK_RNG_STATE = False")
    if fams:
        lines[1:1] = ["import collections", "import functools", "import math"]
        lines.append("LOG = []")
        for fam in fams:
            # a backward inside fn needs grad on at entry: no calls under no_grad then
            lines += [ln for ln in fam.prelude if not (
                ln.startswith("NO_GRAD_CALLS") and any(f.name == "backward" for f in fams))]
            gen.features.add(f"family:{fam.name}")
        lines.append("")
    helpers: list[str] = []
    for h in range(rng.randint(0, 2)):
        name = f"h{h}"
        sc = _Scope({"a": 1}, ["k"], False, list(helpers), 1)
        lines.append(f"def {name}(a, k):")
        lines.append("    global G, GT")
        for _ in range(rng.randint(1, 3)):
            lines += gen.stmt(sc, "    ")
        lines.append(f"    return {rng.choice([n for n, r in sc.tensors.items() if r == 1])}")
        lines.append("")
        helpers.append(name)
    params = [p for fam in fams for p in fam.params]
    if params:
        lines.append("def extra_args(call, x, y, n):")
        lines += ["    " + line for fam in fams for line in fam.make]
        lines += [f"    return ({', '.join(params)},)", ""]
    sc = _Scope({"x": 1, "y": 1}, ["n"], True, helpers, 0)
    body = [line for fam in fams for line in fam.head]
    for fam in fams:
        sc.tensors.update(fam.tensors)
        sc.ints += fam.ints
    body += [line[4:] for _ in range(rng.randint(2, 7)) for line in gen.stmt(sc, "    ")]
    body += [line for fam in fams for line in fam.tail]
    ret = gen.ret(sc)
    extra_ret = [r for fam in fams for r in fam.returns]
    if extra_ret:
        ret = ret[:-1] + " " + ", ".join(extra_ret) + ",)"
    body.append(f"return {ret}")
    signature = ", ".join(["x", "y", "n", "lst", *params])
    if any(fam.entry_method for fam in fams):
        lines += ["class Sub(Base):", f"    def fn(self, {signature}):", "        global G, GT"]
        lines += ["        " + line for line in body]
        lines += ["", "fn = Sub().fn", ""]
    else:
        lines += [f"def fn({signature}):", "    global G, GT"]
        lines += ["    " + line for line in body]
        lines.append("")
    return Program("\n".join(lines), seed, sorted(gen.features))


def generate_inputs(seed: int) -> list[dict[str, object]]:
    """Four calls' arguments: A, A again, A's shape with new values, a new shape and new ints.

    Values are plain Python lists so a saved reproducer is self-contained.
    """
    rng = random.Random(seed ^ 0x5EED)

    def one(size: int, n: int, list_len: int) -> dict[str, object]:
        return {
            "x": [round(rng.uniform(-2, 2), 3) for _ in range(size)],
            "y": [round(rng.uniform(-2, 2), 3) for _ in range(size)],
            "n": n,
            "lst": [round(rng.uniform(-1, 1), 2) for _ in range(list_len)],
        }

    size = rng.randint(2, 5)
    n = rng.randint(0, 5)
    ln = rng.randint(1, 3)
    first = one(size, n, ln)
    second = one(size, n, ln)
    third = one(size + rng.randint(1, 3), rng.randint(0, 5), rng.randint(1, 3))
    return [first, dict(first), second, third]
