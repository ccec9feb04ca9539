"""Late construct families of session 12: lazy iteration across graph breaks, star arguments.

``iter_mutation`` aims at the bug class that escaped this fuzzer in session 11 (a generator
rebuilt at the resume read its list as it was at the break: 6 where eager gives 26). A container
-- a local list, the input ``lst``, a dict, a set, a user object's list attribute (made in ``fn``
or passed in) -- gets a lazy iterator made over it (a generator expression, ``iter``, ``map``,
``filter``, ``zip``, ``enumerate``, ``reversed``, a generator function, a generator method that
reads the attribute when it starts, dict views), which may be advanced with ``next`` a few
times; then a graph break and a mutation of the container in either order (append, extend,
item and slice writes, insert, delete, pop, clear, sort, reverse, ``+=``, rebinding the name or
the attribute, a helper that appends; dict/set writes that change the size, caught as eager's
``RuntimeError``) and the iterator consumed after it (``sum``, ``list``, ``tuple``, a ``for``
loop, ``next``, the iterator on the stack at the break, or a loop that mutates while it
consumes). Elements are tensors or Python numbers.

``star_calls``: ``f(*a)``, ``f(*a, **kw)``, ``f(x, *a, k=v, **kw, j=w)``, ``f(**{...})`` on user
functions (positional, ``*rest``, keyword-only and ``**kw`` parameters), torch functions and
tensor methods, ``functools.partial`` made with star arguments, starred displays ``(*a, y)``,
``[*a, *lst]``, ``{*s, 3}``, ``{**kw, 'q': v}``, starred assignment targets, a star argument
that is a generator over a list mutated after a break; each with a graph break between building
the arguments and the call, inside the argument list (the call pending on the stack), inside the
callee, or none, and the argument containers sometimes mutated after the break.

Every construct runs eagerly without raising (the ``RuntimeError`` a mutated dict or set raises
is caught and logged), and the input list never becomes empty (the generic grammar reads
``lst[0]``).
"""

from __future__ import annotations

import random

from .families import Family, _Names

__all__ = ["ITER_CONSTRUCTS", "ITER_FAMILIES"]

# Constructs of these families that ``--avoid`` can leave out while a find is open (see
# generator.KNOWN_BUG_FEATURES and regressions/).
ITER_CONSTRUCTS = {
    "stale_iterator": "a builtin iterator (iter, map, filter, zip, enumerate, reversed, dict "
    "views) over a container changed before it is consumed (the VM's iterators were snapshots, "
    "fixed in session 12: regressions/test_iterators_see_later_container_changes.py)",
}
# The iterator forms that read their container as they go in the VM too: generators whose
# outermost iterable is the container itself (not a builtin iterator or view made over it).
_LIVE_FORMS = ("(", "it_gen(", "itertools.chain(")
_SNAPSHOTS = (".values()", ".items()", "zip(", "map(", "filter(")


def _brk(rng: random.Random, what: str) -> list[str]:
    """A graph break (rarely none): print, the explicit break, a data-dependent read, an
    unsupported C call."""
    kind = rng.randrange(9)
    if kind <= 2:
        return [f"print('brk', {what})"]
    if kind <= 5:
        return ["torch._dynamo.graph_break()"]
    if kind == 6:
        return ["LOG.append(x.tolist())"]
    if kind == 7:
        return ["LOG.append(zlib.crc32(b'it'))"]
    return []


def _ind(lines: list[str], by: str = "    ") -> list[str]:
    return [by + s for s in lines]


# ---- iter_mutation ---------------------------------------------------------------------------
_ITER_PRELUDE = [
    "import zlib",
    "import itertools",
    "class ItBox:",
    "    def __init__(self, items):",
    "        self.items = items",
    "    def walk(self):",
    "        LOG.append('walk start')",
    "        for v in self.items:",
    "            yield v",
    "def it_gen(c):",
    "    LOG.append('it_gen start')",
    "    for v in c:",
    "        yield v",
    "    LOG.append('it_gen end')",
    "def it_push(c, v):",
    "    c.append(v)",
    "    return len(c)",
    "def it_call(f, it, unused):",
    "    return f(it)",
    "def it_double(v):",
    "    return v * 2",
]

# element kinds: what the container holds, a new element, a map/filter function over it
_TENSOR_ITEMS = ["x", "y * 2.0", "x - 1.0", "x * y"]
_FLOAT_ITEMS = ["1.0", "-2.5", "0.5", "n", "3"]


def _new_item(rng: random.Random, tensors: bool) -> str:
    return rng.choice(["x + 1.0", "y * 3.0", "-x"] if tensors else ["7.0", "-1.5", "n + 0.5"])


def _iterator(
    rng: random.Random, kind: str, c: str, tensors: bool, avoid: frozenset[str]
) -> tuple[str, bool]:
    """A lazy iterator over container expression ``c`` of ``kind`` and whether its items are
    single numbers/tensors (``sum`` can add them) rather than tuples."""
    form = _iterator_form(rng, kind, c, tensors)
    live = form[0].startswith(_LIVE_FORMS) and not any(k in form[0] for k in _SNAPSHOTS)
    if "stale_iterator" in avoid and not live:
        return f"(v for v in {c})", True
    return form


def _iterator_form(rng: random.Random, kind: str, c: str, tensors: bool) -> tuple[str, bool]:
    if kind == "dict":
        return rng.choice([
            (f"iter({c}.values())", True),
            (f"(v * 2.0 for v in {c}.values())", True),
            (f"({c}[k] for k in {c})", True),
            (f"(v for k, v in {c}.items())", True),
            (f"map(it_double, {c}.values())", True),
            (f"iter({c}.items())", False),
            (f"enumerate({c})", False),
        ])
    if kind == "set":
        return rng.choice([
            (f"iter({c})", True), (f"(v * 2 for v in {c})", True),
            (f"map(it_double, {c})", True), (f"filter(lambda v: v > 1, {c})", True),
        ])
    forms = [
        (f"(v * 2.0 for v in {c})", True),
        (f"iter({c})", True),
        (f"map(it_double, {c})", True),
        (f"map(lambda v: v + 1.0, {c})", True),
        (f"it_gen({c})", True),
        (f"zip({c}, range(5))", False),
        (f"zip({c}, {c})", False),
        (f"enumerate({c})", False),
        (f"itertools.chain({c}, [{_new_item(rng, tensors)}])", True),
        (f"(a + b for a, b in zip({c}, {c}))", True),
    ]
    if kind == "list":
        forms.append((f"reversed({c})", True))
    if not tensors:
        forms.append((f"filter(lambda v: v > 0, {c})", True))
    return rng.choice(forms)


def _mutation(rng: random.Random, kind: str, c: str, tensors: bool, rebind: str | None) -> str:
    """One statement changing container ``c`` (``rebind``: the name or attribute that holds
    it, to rebind to a new container; None when rebinding is not allowed)."""
    e = _new_item(rng, tensors)
    if kind == "dict":
        return rng.choice([
            f"{c}['a'] = {e}", f"{c}['z'] = {e}", f"del {c}['b']", f"{c}.pop('a')",
            f"{c}.update(b={e})", f"{c}.update(q={e})", f"{c}.clear()",
            f"{c}['b'] = {c}.pop('b')",  # same size, order changed
        ])
    if kind == "set":
        return rng.choice([f"{c}.add(9)", f"{c}.add(1)", f"{c}.discard(2)", f"{c}.clear()"])
    forms = [
        f"{c}.append({e})", f"{c}.extend([{e}, {e}])", f"{c}[0] = {e}", f"{c}.insert(0, {e})",
        f"{c} += [{e}]", f"{c}.reverse()", f"{c}[:] = [{e}]", f"{c}[1:] = []",
        f"it_push({c}, {e})", f"{c}[-1] = {e}",
        f"if len({c}) > 1:\n    del {c}[0]", f"if len({c}) > 1:\n    {c}.pop()",
    ]
    if rebind is not None:
        forms.append(f"{rebind} = [{e}, {e}]")
    if rebind is not None:
        forms.append(f"{c}.clear()")
    if not tensors:
        forms.append(f"{c}.sort()")
    return rng.choice(forms)


def _consume(rng: random.Random, it: str, r: str, summable: bool, tensors: bool,
             grow: str | None) -> list[str]:
    """Statements consuming iterator ``it`` into ``r`` (``grow``: a statement that mutates the
    container while the loop consumes it)."""
    start = "torch.zeros(())" if tensors else "0.0"
    forms = [
        [f"{r} = list({it})"],
        [f"{r} = tuple({it})"],
        [f"{r} = []", f"for w in {it}:", f"    {r}.append(w)"],
        [f"{r} = [next({it}, None), next({it}, None)]"],
        [f"{r} = it_call(list, {it}, print('stack', len(LOG)))"],
        [f"{r} = []", f"for w in {it}:", f"    {r}.append(w)", "    print('in loop')"],
    ]
    if summable:
        forms += [[f"{r} = sum({it}, {start})"], [f"{r} = it_call(sum, {it}, print('sum'))"]]
    if grow is not None:
        forms += [[f"{r} = []", f"for w in {it}:", f"    {r}.append(w)",
                   f"    if len({r}) < 3:", *_ind(grow.split("\n"), "        ")]]
    return rng.choice(forms)


def iter_mutation(rng: random.Random, k: str, avoid: frozenset[str]) -> Family:
    f = Family("iter_mutation")
    name = _Names(k)
    f.prelude = list(_ITER_PRELUDE)
    box = name("ibox")
    f.params, f.make = [box], [f"{box} = ItBox([x * 1.0, y + 0.5])"]
    for _ in range(rng.randint(2, 3)):
        c, it, r = name("c"), name("it"), name("r")
        kind = rng.choice(["list", "list", "input", "attr", "arg_attr", "dict", "set"])
        tensors = rng.random() < 0.6
        items = _TENSOR_ITEMS if tensors else _FLOAT_ITEMS
        chosen = rng.sample(items, rng.randint(2, 3))
        made: list[str] = []
        rebind: str | None = c
        if kind == "list":
            made = [f"{c} = [{', '.join(chosen)}]"]
            cexpr, ckind = c, "list"
        elif kind == "input":  # fn's argument: its mutations are compared after the call
            cexpr, ckind, tensors, rebind = "lst", "input", False, None
        elif kind == "attr":
            made = [f"{c} = ItBox([{', '.join(chosen)}])"]
            cexpr, ckind, rebind = f"{c}.items", "list", f"{c}.items"
        elif kind == "arg_attr":
            cexpr, ckind, tensors, rebind = f"{box}.items", "list", True, f"{box}.items"
        elif kind == "dict":
            vals = (chosen * 2)[:2]
            made = [f"{c} = {{'a': {vals[0]}, 'b': {vals[1]}}}"]
            cexpr, ckind = c, "dict"
        else:
            made = [f"{c} = {{1, 2, n}}"]
            cexpr, ckind, tensors = c, "set", False
        if kind in ("attr", "arg_attr") and rng.random() < 0.4:
            owner = c if kind == "attr" else box
            itexpr, summable = f"{owner}.walk()", True  # reads .items when it starts
        else:
            itexpr, summable = _iterator(rng, "list" if ckind == "input" else ckind, cexpr,
                                         tensors, avoid)
        if ckind == "input":
            mut = rng.choice([f"lst.append({_new_item(rng, False)})", "lst[0] = 9.0",
                              "lst.insert(0, -3.0)", "lst.extend([1.5, n])", "lst.reverse()",
                              "lst += [2.5]", "it_push(lst, 0.25)", "lst.sort()",
                              "if len(lst) > 1:\n    lst.pop()"])
        else:
            mut = _mutation(rng, ckind, cexpr, tensors, rebind)
        advance = [f"LOG.append(('adv', type(next({it}, None)).__name__))"] * rng.choice(
            [0, 0, 1, 2])
        order = rng.randrange(4)
        body = [*made, f"{it} = {itexpr}", *advance]
        if order == 0:  # break, then the mutation
            body += [*_brk(rng, "len(LOG)"), *mut.split("\n")]
        elif order == 1:  # the mutation, then the break
            body += [*mut.split("\n"), *_brk(rng, "'m'")]
        elif order == 2:  # break, more advancing, the mutation
            body += [*_brk(rng, "'a'"), f"LOG.append(next({it}, None) is None)", *mut.split("\n")]
        else:  # break, then mutated while consumed
            body += _brk(rng, "'g'")
        grow = mut if order == 3 and ckind in ("list", "input", "dict", "set") else None
        consume = _consume(rng, it, r, summable, tensors, grow)
        if order == 3 and grow is None:
            consume = [*mut.split("\n"), *consume]
        # a dict or set that changed size raises when iterated on: eager's RuntimeError
        f.head += [*body, f"{r} = None", "try:", *_ind(consume),
                   "except RuntimeError as e:", "    LOG.append(('changed', str(e)))"]
        f.returns.append(r)
        if made and kind != "set":
            f.returns.append(c if kind != "attr" else f"{c}.items")
    return f


# ---- star_calls ------------------------------------------------------------------------------
_STAR_PRELUDE = [
    "import functools",
    "import zlib",
    "def st_f(a, b=1.0, *rest, scale=1.0, **kw):",
    "    LOG.append(('st_f', len(rest), sorted(kw)))",
    "    return a * scale + b + len(rest) + sum(kw.values(), 0.0)",
    "def st_brk(*a, **k):",
    "    print('st_brk', len(a), sorted(k))",
    "    return a[0] * 2.0 + len(k)",
    "def st_kw(**k):",
    "    return sorted(k.items())",
]


def star_calls(rng: random.Random, k: str, avoid: frozenset[str]) -> Family:
    f = Family("star_calls")
    name = _Names(k)
    f.prelude = list(_STAR_PRELUDE)
    for _ in range(rng.randint(2, 3)):
        a, kw, r, g = name("a"), name("kw"), name("r"), name("g")
        args = rng.choice(["[x, y]", "(x, y * 2.0)", "[x]", "(y, 1.5, n)", "[x, 2.0, y, 3.0]"])
        kws = rng.choice(["{'scale': 2.0}", "{'scale': 0.5, 'extra': n}", "{}",
                          "{'extra': y, 'more': 1.0}", "dict(scale=3.0)"])
        calls = [
            f"st_f(*{a})", f"st_f(*{a}, **{kw})", f"st_f(x, *{a}, scale=2.0)",
            f"st_f(x, *{a}, late=n, **{kw}, later=1.0)", "st_f(**{'a': x, 'b': y})",
            f"st_f(x, **{kw})", f"st_f(*{a}, *{a}, **{kw})", f"st_brk(*{a}, **{kw})",
            f"torch.add(*{a}[:2], **{{'alpha': 2.0}})" if args.startswith("[x, y]") else
            f"torch.mul({a}[0], *[2.0])",
            "x.add(*[y], **{'alpha': 0.5})", "torch.stack((*[x, y], x + 1.0))",
            f"torch.cat([*[x, y], {a}[0] * x])",
            f"functools.partial(st_f, *{a}, **{kw})(late=n)",
            f"st_kw(**{kw}, z=1)", f"dict(**{kw}, z=n)",
        ]
        displays = [
            f"(*{a}, y)", f"[*{a}, *lst]", f"[x, *{a}, x]", "{*[1, 2], n, *range(2)}",
            f"{{**{kw}, 'q': x}}", f"{{'p': y, **{kw}, **{{'p': n}}}}",
        ]
        form = rng.randrange(7)
        f.head += [f"{a} = {args}", f"{kw} = {kws}"]
        if form == 0:  # a break between building the arguments and the call
            f.head += [*_brk(rng, f"len({a})"), f"{r} = {rng.choice(calls)}"]
        elif form == 1:  # the arguments mutated after a break: the call sees the new ones
            mutate = rng.choice([
                f"{kw}['scale'] = 4.0" if "scale" in kws else f"{kw}['extra'] = 2.5",
                f"{a} = [*{a}, y]", f"{a} = ({a}[0] + 1.0, *{a}[1:])",
            ])
            f.head += [*_brk(rng, "'mut'"), mutate, f"{r} = {rng.choice(calls)}"]
        elif form == 2:  # a break inside the argument list: the call pending on the stack
            f.head += [f"{r} = st_f(*{a}, len(str(print('pend', n))), **{kw})"
                       if rng.random() < 0.5 else
                       f"{r} = st_brk(x, *{a}, z=print('pend'), **{kw})"]
        elif form == 3:  # starred displays after a break
            f.head += [*_brk(rng, "'disp'"), f"{r} = {rng.choice(displays)}"]
        elif form == 4:  # a break inside a starred display
            f.head += [rng.choice([
                f"{r} = (*{a}, print('in display'), y * 2.0)",
                f"{r} = [*{a}, y * 3.0, print('in list'), *lst]",
                f"{r} = {{**{kw}, 'p': print('in dict'), 'q': x}}",
            ])]
        elif form == 5:  # starred assignment targets across a break
            f.head += [f"p{r}, *{r} = [x, y, x * 2.0, n]", *_brk(rng, "len(LOG)"),
                       f"*{g}, q{r} = (*{r}, p{r})", f"{r} = ({r}, {g}, q{r})"]
        else:  # a generator over a list as the star argument, the list mutated after a break
            f.head += [f"l{g} = [x, y]", f"{g} = (v * 2.0 for v in l{g})",
                       *_brk(rng, "'gstar'"), f"l{g}.append(x + 3.0)",
                       f"{r} = st_f(*{g}, **{kw})"]
        f.returns += [r, a, kw]
    return f


ITER_FAMILIES = {"iter_mutation": iter_mutation, "star_calls": star_calls}
