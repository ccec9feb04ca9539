"""Construct family ``py_objects``: Python object behaviour around tensors across graph breaks.

The generic grammar and the other families mostly keep Python state in globals, lists and a few
attributes. This one aims at what a frame carries across a graph break and what the VM models
symbolically: closure cells rebound with ``nonlocal``, generators and iterators consumed partly
before a break and resumed after it (or left suspended, so eager runs their ``finally`` when the
frame ends), ``try``/``except``/``finally`` with tensor work and a break inside, user classes with
properties, ``__getattr__``, methods that mutate attributes (tensors in place too), and user
context managers with a break in their block. Breaks are ``print`` or an explicit
``torch._dynamo.graph_break()`` (the program's own call: eager ignores it) or none, drawn per
construct. Every construct runs eagerly without raising (the exceptions it raises are caught).
"""

from __future__ import annotations

import random

from .families import Family, _Names, _per_call

__all__ = ["LATE_FAMILIES", "py_objects"]

_PRELUDE = [
    "def pyo_gen(v, steps):",
    "    LOG.append('gen start')",
    "    try:",
    "        for i in range(steps):",
    "            yield v * (i + 1)",
    "            LOG.append(('gen step', i))",
    "    finally:",
    "        LOG.append('gen finally')",
    "class PyoBox:",
    "    def __init__(self, t, n):",
    "        self.t = t",
    "        self.n = n",
    "    @property",
    "    def scaled(self):",
    "        LOG.append('scaled')",
    "        return self.t * (self.n + 1)",
    "    def __getattr__(self, name):",
    "        LOG.append(('getattr', name))",
    "        if name.startswith('dyn'):",
    "            return self.n * 2.0",
    "        raise AttributeError(name)",
    "    def bump(self, v):",
    "        self.n += 1",
    "        self.t = self.t + v",
    "        return self",
    "class PyoMgr:",
    "    def __init__(self, tag, swallow=False):",
    "        self.tag = tag",
    "        self.swallow = swallow",
    "        self.depth = 0",
    "    def __enter__(self):",
    "        self.depth += 1",
    "        LOG.append(('enter', self.tag, self.depth))",
    "        return self",
    "    def __exit__(self, kind, value, tb):",
    "        LOG.append(('exit', self.tag, kind.__name__ if kind else None))",
    "        self.depth -= 1",
    "        return self.swallow and kind is KeyError",
]

_FORMS = 8


def _brk(rng: random.Random, what: str) -> list[str]:
    """A graph break (or none) at this point of the construct."""
    kind = rng.randrange(3)
    if kind == 0:
        return [f"print('brk', {what})"]
    if kind == 1:
        return ["torch._dynamo.graph_break()"]
    return []


def py_objects(rng: random.Random, k: str, avoid: frozenset[str]) -> Family:
    f = Family("py_objects")
    name = _Names(k)
    f.prelude = list(_PRELUDE)
    box = name("box")
    table = f"B_{box.upper()}"
    f.prelude.append(f"{table} = {_per_call(rng, ['0', '1', '2', '3'])}")
    f.params, f.make = [box], [f"{box} = PyoBox(y.clone(), {table}[call])"]
    f.returns.append(f"{box}.n")
    for _ in range(rng.randint(2, 3)):
        form = rng.randrange(_FORMS)
        t, q, v = name("t"), name("q"), name("v")
        if form == 0:  # a closure cell rebound with nonlocal on both sides of a break
            f.head += [
                f"{v} = 0",
                f"def bump{t}(a):",
                f"    nonlocal {v}",
                f"    {v} += 1",
                f"    return a * {v}",
                f"{t} = bump{t}(x)",
                *_brk(rng, v),
                f"{t} = {t} + bump{t}(y)",
                f"{q} = {v}",
            ]
            f.returns.append(q)
        elif form == 1:  # a generator consumed partly, a break, then more (or left suspended)
            steps = rng.choice(["2", "3", "n + 1"])
            f.head += [
                f"{v} = pyo_gen({rng.choice(['x', 'y', 'x + y'])}, {steps})",
                f"{t} = next({v})",
                *_brk(rng, "'gen'"),
            ]
            tail = rng.randrange(3)
            if tail == 0:
                f.head.append(f"{t} = {t} + next({v}, x)")
            elif tail == 1:
                f.head.append(f"{t} = {t} + sum({v}, torch.zeros(()))")
            # tail 2: left suspended, its finally runs when the frame ends
        elif form == 2:  # an iterator over tensors consumed partly across a break
            src = rng.choice(["[x, y, x * 2.0]", "zip([x, y], [y, x])", "enumerate([y, x])"])
            f.head += [f"{v} = iter({src})", f"{q} = next({v})", *_brk(rng, "'it'")]
            if src.startswith("["):
                f.head += [f"{t} = {q} + sum(list({v}), torch.zeros(()))"]
            elif src.startswith("zip"):
                f.head += [f"{t} = {q}[0] * {q}[1] + len(list({v}))"]
            else:
                f.head += [f"{t} = {q}[1] * {q}[0] + next({v})[1]"]
        elif form == 3:  # try/except/finally with tensor work and a break in the try
            exc = rng.choice(["ValueError", "KeyError", "IndexError"])
            raise_if = rng.choice(["n > 2", "n % 2 == 0", "True", "False"])
            f.head += [
                f"{t} = x * 2.0",
                "try:",
                f"    {t} = {t} + y",
                *["    " + s for s in _brk(rng, "'try'")],
                f"    if {raise_if}:",
                f"        raise {exc}('boom')",
                f"    {t} = {t} * 3.0",
                f"except {exc} as e{t}:",
                f"    LOG.append(('caught', type(e{t}).__name__))",
                f"    {t} = {t} - 1.0",
                "finally:",
                "    LOG.append('finally')",
                f"    {t} = {t} + 0.5",
            ]
        elif form == 4:  # a user object: property, __getattr__, in-place and rebinding writes
            f.head += [
                f"{box}.t.{rng.choice(['add_(1.0)', 'mul_(0.5)', 'neg_()'])}",
                *_brk(rng, f"{box}.n"),
                f"{t} = {box}.scaled + {box}.{rng.choice(['dyn_a', 'dyn_b'])}",
                f"{box}.bump({rng.choice(['x', 'y', '1.0'])})",
                f"{q} = (hasattr({box}, 'missing'), {box}.n)",
            ]
            f.returns.append(q)
        elif form == 5:  # a user manager with a break in its block
            swallow = rng.random() < 0.5
            f.head += [
                f"{v} = PyoMgr('m{t}', swallow={swallow})",
                f"{t} = x + 1.0",
                f"with {v} as m{t}:",
                f"    {t} = {t} * (m{t}.depth + 1)",
                *["    " + s for s in _brk(rng, f"m{t}.depth")],
                f"    {t} = {t} + y",
            ]
            if swallow:
                f.head += ["    if n > 1:", "        raise KeyError('k')", f"    {t} = {t} * 2.0"]
            f.head.append(f"{q} = {v}.depth")
            f.returns.append(q)
        elif form == 6:  # a list held by a closure, appended to across a break, read back
            f.head += [
                f"{v} = [x * 0.5]",
                f"def add{t}(a):",
                f"    {v}.append(a + {v}[-1])",
                f"    return len({v})",
                f"{q} = add{t}(y)",
                *_brk(rng, q),
                f"{q} = {q} + add{t}(x)",
                f"{t} = {v}[-1] - {v}[0]",
            ]
            f.returns.append(q)
        else:  # a generator expression and a dict of tensors mutated across a break
            f.head += [
                f"{v} = {{'a': x * 1.5, 'b': y}}",
                f"{q} = (t * 2.0 for t in {v}.values())",
                f"{t} = next({q})",
                *_brk(rng, f"len({v})"),
                f"{v}['b'] = {v}['b'] + {t}",
                f"{t} = {t} + {v}['b'] + next({q})",
            ]
        f.tensors[t] = 1
    return f


LATE_FAMILIES = {"py_objects": py_objects}
