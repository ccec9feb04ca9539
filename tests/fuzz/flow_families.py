"""Late construct families of session 9: exceptions, graph breaks in awkward places, in-place
writes through views and aliases (drawn as ``object_families.py``'s, each with its own stream).

``exceptions``: ``try``/``except``/``else``/``finally`` around tensor work, builtin errors raised
by the language and caught (``KeyError`` from a dict, ``IndexError`` from a list or a tensor,
``StopIteration`` from ``next()``, ``ValueError`` from ``math``/``int``, ``RuntimeError`` from a
torch op), user exception classes carrying tensors, ``raise ... from``, implicit chaining, bare
re-raise through a ``finally`` that writes in place, ``contextlib.suppress``, ``return`` inside
``try``/``finally``, ``continue`` from an ``except`` in a loop, ``throw()``/``close()`` on a
generator that catches, failing ``assert``s, a user manager's ``__exit__`` that sees (and may
swallow) the error; and, on some calls,
an exception escaping ``fn`` after side effects (``EXPECTED_EXCEPTIONS``: the runner compares
its type, args, attributes, cause and context with eager's).

``break_spots``: a graph break (``print``, ``torch._dynamo.graph_break()``, an unsupported C
call, a data-dependent ``tolist()``) inside nested ``with`` blocks, ``for`` loops over lists,
dicts and ``zip``, ``try`` blocks, generator bodies, helpers called in loops and comprehensions,
``while`` loops, grad-mode blocks (``requires_grad`` of results and gradients compared); outer
objects (a user object argument, lists, dicts) mutated on both sides.

``inplace_views``: in-place writes through views of inputs, ``out=`` arguments (an input, a
fresh buffer, a view), slice and mask assignment, views kept across a break or in a dict,
``copy_``/``index_add_``/``masked_fill_``, in-place metadata ops, a module buffer that is an
argument, and under autograd in-place writes to views of non-leaf tensors and to a non-leaf
input that requires grad (gradients compared).

Every construct runs eagerly without raising, except the declared escapes.
"""

from __future__ import annotations

import random

from .families import Family, _Names, _per_call

__all__ = ["FLOW_FAMILIES"]


def _brk(rng: random.Random, what: str, unsupported: bool = True) -> list[str]:
    """A graph break (or none) at this point: print, the explicit break, an unsupported C call,
    a data-dependent read."""
    kind = rng.randrange(5 if unsupported else 3)
    if kind == 0:
        return [f"print('brk', {what})"]
    if kind == 1:
        return ["torch._dynamo.graph_break()"]
    if kind == 3:
        return ["LOG.append(zlib.crc32(b'fz'))"]
    if kind == 4:
        return ["LOG.append(x.tolist())"]
    return []


def _ind(lines: list[str], by: str = "    ") -> list[str]:
    return [by + s for s in lines]


# ---- exceptions ----------------------------------------------------------------------------------
_EXC_PRELUDE = [
    "import contextlib",
    "import zlib",
    "class FzError(Exception):",
    "    def __init__(self, msg, t=None):",
    "        super().__init__(msg)",
    "        self.t = t",
    "class FzSub(FzError):",
    "    pass",
    "def fz_raise(kind, v):",
    "    LOG.append(('fz_raise', kind))",
    "    if kind == 0:",
    "        raise FzError('zero', v)",
    "    if kind == 1:",
    "        raise KeyError('k1')",
    "    if kind == 2:",
    "        raise FzSub('sub', v * 2.0)",
    "    return v + 1.0",
    "def fz_lookup(d, key):",
    "    try:",
    "        return d[key]",
    "    except KeyError as e:",
    "        LOG.append(('miss', e.args))",
    "        raise FzError('missing ' + str(key), None) from e",
    "def fz_finally(v, k):",
    "    try:",
    "        if k > 2:",
    "            return v * 2.0",
    "        LOG.append(('fin body', k))",
    "    finally:",
    "        LOG.append(('fin', k))",
    "    return v - 1.0",
    "def fz_gen(v):",
    "    try:",
    "        yield v",
    "        yield v * 2.0",
    "    except FzError as e:",
    "        LOG.append(('gen caught', e.args))",
    "        yield v * 3.0",
    "    finally:",
    "        LOG.append('gen finally')",
    "class FzMgr:",
    "    def __init__(self, swallow):",
    "        self.swallow = swallow",
    "        self.seen = None",
    "    def __enter__(self):",
    "        LOG.append('mgr enter')",
    "        return self",
    "    def __exit__(self, kind, value, tb):",
    "        self.seen = None if kind is None else (kind.__name__, value.args[0])",
    "        LOG.append(('mgr exit', self.seen))",
    "        return self.swallow",
    "EXPECTED_EXCEPTIONS = ('FzError', 'ValueError', 'FzSub')",
]

_CONDS = ["n > 2", "n % 2 == 0", "True", "False", "bool(x.sum() > 0)", "len(lst) > 1"]
_BAD_OPS = [
    ("x.reshape(3, 7)", "RuntimeError"),
    ("math.sqrt(-1.0 - n)", "ValueError"),
    ("int('a' + str(n))", "ValueError"),
    ("lst.index(99.0)", "ValueError"),
    ("{}.popitem()", "KeyError"),
    ("x[n + 8]", "IndexError"),
    ("1.0 / (n - n)", "ZeroDivisionError"),
]


def exceptions(rng: random.Random, k: str, avoid: frozenset[str]) -> Family:
    f = Family("exceptions")
    name = _Names(k)
    f.prelude = list(_EXC_PRELUDE)
    for _ in range(rng.randint(2, 3)):
        form = rng.randrange(13)
        t, q, e = name("t"), name("q"), name("e")
        if form == 0:  # try/except/else/finally, a raise on some calls, a break in the try
            exc = rng.choice(["ValueError", "KeyError", "FzError"])
            arg = "'v', n" if exc != "FzError" else "'fz', x"
            f.head += [
                f"{t} = x * 1.5",
                "try:",
                f"    {t} = {t} + y",
                *_ind(_brk(rng, t)),
                f"    if {rng.choice(_CONDS)}:",
                f"        raise {exc}({arg})",
                f"    {t} = {t} * 2.0",
                f"except {exc} as {e}:",
                f"    LOG.append(('caught', type({e}).__name__, len({e}.args)))",
                f"    {t} = {t} - 1.0",
                "else:",
                "    LOG.append('else')",
                f"    {t} = {t} + 0.25",
                "finally:",
                "    LOG.append('finally')",
                "    GL.append(n)",
            ]
        elif form == 1:  # KeyError from a dict lookup (str or int keys)
            if rng.random() < 0.5:
                f.head += [f"{q} = {{'a': x, 'b': y}}", f"{e} = ['a', 'b', 'c'][n % 3]"]
            else:
                f.head += [f"{q} = {{0: x, 2: y * 2.0}}", f"{e} = n"]
            f.head += [
                "try:",
                f"    {t} = {q}[{e}] * 2.0",
                *_ind(_brk(rng, e)),
                "except KeyError as err:",
                "    LOG.append(('keyerror', err.args))",
                f"    {t} = y - 1.0",
            ]
        elif form == 2:  # IndexError from a list of tensors or of floats
            if rng.random() < 0.5:
                f.head += [
                    "try:",
                    f"    {t} = [x, y, x * 2.0][n] + 1.0",
                    f"except IndexError as {e}:",
                    f"    LOG.append(('index', str({e})))",
                    f"    {t} = y * 0.5",
                ]
            else:
                f.head += [
                    "try:",
                    f"    {q} = lst[n]",
                    "except IndexError:",
                    f"    {q} = -1.0",
                    f"{t} = x + {q}",
                ]
                f.returns.append(q)
        elif form == 3:  # StopIteration from next() on an iterator or a generator
            src = rng.choice(
                ["iter([x, y])", "(v * 2.0 for v in [x, y])", "iter({'a': x}.values())"]
            )
            f.head += [
                f"{q} = {src}",
                f"{t} = next({q})",
                *_brk(rng, "'it'"),
                "try:",
                f"    {t} = {t} + next({q})",
                f"    {t} = {t} + next({q})",
                f"except StopIteration as {e}:",
                f"    LOG.append(('stop', {e}.value))",
                f"    {t} = {t} - 0.5",
            ]
        elif form == 4:  # user exception classes from a helper, caught by the most derived
            kind = rng.choice(["n % 4", "0", "2", "3", "1"])
            f.head += [
                "try:",
                f"    {t} = fz_raise({kind}, {rng.choice(['x', 'y', 'x + y'])})",
                *_ind(_brk(rng, t)),
                f"except FzSub as {e}:",
                f"    {t} = {e}.t + 1.0",
                f"except FzError as {e}:",
                f"    {t} = {e}.t * 2.0",
                "except KeyError:",
                f"    {t} = y - 2.0",
            ]
        elif form == 5:  # raise ... from, and an implicit context, read back
            if rng.random() < 0.5:
                key = rng.choice(["'a'", "'z'", "['a', 'z'][n % 2]"])
                f.head += [
                    "try:",
                    f"    {t} = fz_lookup({{'a': x}}, {key}) * 3.0",
                    f"except FzError as {e}:",
                    f"    LOG.append(('cause', type({e}.__cause__).__name__,"
                    f" {e}.__cause__.args, {e}.__suppress_context__))",
                    f"    {t} = y + 1.0",
                ]
            else:
                f.head += [
                    "try:",
                    "    try:",
                    f"        {t} = x * ({rng.choice(['1.0 / (n - n)', '2.0'])})",
                    "    except ZeroDivisionError:",
                    "        raise FzError('ctx', y * 2.0)",
                    f"except FzError as {e}:",
                    f"    LOG.append(('ctx', type({e}.__context__).__name__,"
                    f" {e}.__cause__ is None, {e}.__suppress_context__))",
                    f"    {t} = {e}.t",
                ]
        elif form == 6:  # a bare re-raise through a finally that writes in place
            f.head += [
                f"{t} = x.clone()",
                "try:",
                "    try:",
                f"        {t}.add_(1.0)",
                f"        if {rng.choice(_CONDS)}:",
                "            raise IndexError('i')",
                "    except IndexError:",
                "        LOG.append('inner')",
                "        raise",
                "    finally:",
                f"        {t}.mul_(2.0)",
                *_ind(_brk(rng, "'fin'"), "        "),
                "        LOG.append('inner finally')",
                "except IndexError as err:",
                "    LOG.append(('outer', err.args))",
                f"    {t} = {t} + y",
            ]
        elif form == 7:  # an error raised by a builtin or a torch op, caught
            op, exc = rng.choice(_BAD_OPS)
            f.head += [
                f"{t} = y * 0.5",
                "try:",
                f"    {q} = {op}",
                f"    {t} = {t} + 1.0",
                f"except {exc}:",
                f"    LOG.append('{exc}')",
                f"    {t} = {t} + x",
            ]
        elif form == 9:  # return inside try/finally in a helper; a loop continuing on errors
            f.head += [
                f"{t} = fz_finally(x, n) + fz_finally(y, {rng.choice(['0', '3', 'len(lst)'])})",
                f"for k{t} in range(3):",
                "    try:",
                f"        if k{t} == {rng.choice(['0', '1', 'n % 3'])}:",
                f"            raise FzError('loop', k{t})",
                f"        {t} = {t} + k{t}",
                *_ind(_brk(rng, f"k{t}", unsupported=False), "        "),
                "    except FzError as err:",
                "        LOG.append(('loop', err.args))",
                "        continue",
                "    finally:",
                f"        GL.append(k{t})",
            ]
        elif form == 10:  # throw() into a generator that catches, close() runs its finally
            f.head += [
                f"{q} = fz_gen({rng.choice(['x', 'y'])})",
                f"{t} = next({q})",
                *_brk(rng, "'g'", unsupported=False),
            ]
            if rng.random() < 0.5:
                f.head += [f"{t} = {t} + {q}.throw(FzError('in'))", f"{q}.close()"]
            else:
                f.head += [f"{t} = {t} + next({q})", f"{q}.close()"]
        elif form == 11:  # an assert that fails on some calls, caught; str/repr of errors
            f.head += [
                f"{t} = x + 0.5",
                "try:",
                f"    assert {rng.choice(_CONDS)}, ('assert', n)",
                f"    {t} = {t} * 2.0",
                f"except AssertionError as {e}:",
                f"    LOG.append((str({e}), repr({e}), {e}.args))",
                f"    {t} = {t} - y",
            ]
        elif form == 12:  # a user manager's __exit__ sees the error and may swallow it
            f.head += [
                f"{t} = y * 2.0",
                "try:",
                f"    with FzMgr({rng.choice(['True', 'False', 'n > 2'])}) as m{t}:",
                f"        {t} = {t} + x",
                *_ind(_brk(rng, "'mgr'", unsupported=False), "        "),
                f"        fz_raise({rng.choice(['0', '1', '2', 'n % 3'])}, {t})",
                f"        {t} = {t} * 3.0",
                f"    LOG.append(('after with', m{t}.seen))",
                "except (FzError, KeyError) as err:",
                "    LOG.append(('escaped with', type(err).__name__))",
            ]
        else:  # contextlib.suppress around a failing lookup
            key = rng.choice(["'a'", "'b'"])
            f.head += [
                f"{t} = x - 1.0",
                "with contextlib.suppress(KeyError, IndexError):",
                f"    {t} = {t} * 2.0",
                f"    {t} = {t} + {{'a': y}}[{key}]",
                f"    {t} = {t} * 3.0",
            ]
        f.tensors[t] = 1
    if rng.random() < 0.5:  # an exception escapes fn on some calls, after side effects
        esc = name("esc")
        table = f"E_{esc.upper()}"
        f.prelude.append(f"{table} = {_per_call(rng, ['0', '0', '1', '2', '3'])}")
        f.params, f.make = [esc], [f"{esc} = {table}[call]"]
        f.tail += [
            f"GL.append(('before', {esc}))",
            f"x.{rng.choice(['add_(1.0)', 'mul_(2.0)'])}",
            f"if {esc} == 1:",
            f"    raise FzError('escape', x * 2.0) from KeyError('why', {esc})",
            f"if {esc} == 2:",
            "    raise ValueError('bad', n, len(lst))",
            f"if {esc} == 3:",
            f"    fz_lookup({{}}, {esc})",
        ]
    return f


# ---- graph breaks in awkward places --------------------------------------------------------------
_BRK_PRELUDE = [
    "import zlib",
    "class BkMgr:",
    "    def __init__(self, tag):",
    "        self.tag = tag",
    "        self.depth = 0",
    "    def __enter__(self):",
    "        self.depth += 1",
    "        LOG.append(('enter', self.tag))",
    "        return self",
    "    def __exit__(self, kind, value, tb):",
    "        LOG.append(('exit', self.tag, kind is None))",
    "        self.depth -= 1",
    "        return False",
    "class BkState:",
    "    def __init__(self, t):",
    "        self.t = t",
    "        self.items = []",
    "        self.count = 0",
    "        self.seen = {}",
]


def break_spots(rng: random.Random, k: str, avoid: frozenset[str]) -> Family:
    f = Family("break_spots")
    name = _Names(k)
    f.prelude = list(_BRK_PRELUDE)
    st = name("st")
    f.params, f.make = [st], [f"{st} = BkState(y.clone())"]
    # a generator and a helper whose bodies break (module level: one break kind each)
    gen, helper = f"bkgen_{k}", f"bkhelp_{k}"
    f.prelude += [
        f"def {gen}(vs, x):",
        "    for i, v in enumerate(vs):",
        *_ind(_brk(rng, "i"), "        "),
        "        LOG.append(('gen', i))",
        "        yield v * (i + 1.0)",
        f"def {helper}(s, v, x):",
        "    s.count += 1",
        *_ind(_brk(rng, "s.count")),
        "    s.items.append(v.sum())",
        "    s.t.add_(v)",
        "    return v * s.count",
    ]
    for _ in range(rng.randint(2, 3)):
        form = rng.randrange(9)
        t, q, v = name("t"), name("q"), name("v")
        if form == 8:  # grad mode across a break: requires_grad of results, gradients
            w = name("w")
            f.params.append(w)
            f.make.append(f"{w} = (x * 0.5 - 0.2).detach().requires_grad_()")
            f.tail += [
                f"with torch.{rng.choice(['no_grad', 'enable_grad'])}():",
                f"    {q} = x * {w}",
                *_ind(_brk(rng, f"{q}.requires_grad")),
                "    with torch.enable_grad():",
                f"        {v} = {q} * {w}",
                *_ind(_brk(rng, "'in'", unsupported=False), "        "),
                f"    {q} = {q} + {v}.detach()",
                f"{q} = ({q}, {v}, {q}.requires_grad, {v}.requires_grad)",
            ]
            f.returns.append(q)
            continue
        if form == 0:  # nested with blocks: a user manager, no_grad, another manager
            f.head += [
                f"{v} = BkMgr('o{t}')",
                f"with {v}:",
                "    with torch.no_grad():",
                f"        {t} = x * 2.0",
                *_ind(_brk(rng, t), "        "),
                f"        {t} = {t} + y",
                "    LOG.append(('grad', torch.is_grad_enabled()))",
                f"    with BkMgr('i{t}') as m{t}:",
                *_ind(_brk(rng, f"m{t}.depth"), "        "),
                f"        {t} = {t} * (m{t}.depth + {v}.depth)",
                f"{q} = {v}.depth",
            ]
            f.returns.append(q)
        elif form == 1:  # a for loop over a container with a break, outer objects mutated
            src = rng.choice(
                ["enumerate([x, y, x * y])", "{'a': x, 'b': y}.items()", "zip([0, 1], [y, x])"]
            )
            f.head += [
                f"{q} = []",
                f"{v} = {{'n': 0}}",
                f"for i{t}, w{t} in {src}:",
                f"    w{t} = w{t} + 1.0",
                *_ind(_brk(rng, f"i{t}")),
                f"    {q}.append(w{t}.sum())",
                f"    {v}['n'] += 1",
                f"    {st}.seen[i{t}] = {v}['n']",
                f"    if {v}['n'] > {rng.choice(['1', 'n', '5'])}:",
                "        break",
                f"{t} = torch.stack({q}).sum() + x",
            ]
            f.returns.append(v)
        elif form == 2:  # a break in a try block, an exception after it, a finally
            f.head += [
                f"{t} = y + 0.5",
                "try:",
                f"    {st}.items.append(n)",
                *_ind(_brk(rng, "n")),
                f"    {t} = {t} * x",
                f"    if {rng.choice(['n > 1', 'True', 'False'])}:",
                "        raise KeyError('b')",
                "except KeyError:",
                f"    {t} = {t} - 1.0",
                *_ind(_brk(rng, "'exc'", unsupported=False)),
                "finally:",
                f"    {st}.count += 10",
            ]
        elif form == 3:  # a generator whose body breaks, consumed by a loop or sum
            src = rng.choice(["[x, y]", "[y, x, x + y]"])
            if rng.random() < 0.5:
                f.head += [
                    f"{t} = x * 0.0", f"for g{t} in {gen}({src}, x):", f"    {t} = {t} + g{t}"
                ]
            else:
                f.head += [f"{t} = sum({gen}({src}, x), torch.zeros(()))"]
        elif form == 4:  # a breaking helper called in a loop, mutating the state object
            f.head += [
                f"{t} = x",
                f"for j{t} in range({rng.choice(['2', 'n % 3 + 1'])}):",
                f"    {t} = {helper}({st}, {t} * 0.5, x)",
            ]
        elif form == 5:  # a comprehension calling the breaking helper
            f.head += [
                f"{q} = [{helper}({st}, w, x) for w in {rng.choice(['(x, y)', '[y]'])}]",
                f"{t} = {q}[0] + {q}[-1]",
            ]
        elif form == 6:  # a while loop on a mutated dict, a break in its body
            f.head += [
                f"{v} = {{'left': {rng.choice(['2', 'n % 3 + 1'])}}}",
                f"{t} = y",
                f"while {v}['left'] > 0:",
                f"    {v}['left'] -= 1",
                *_ind(_brk(rng, f"{v}['left']")),
                f"    {t} = {t} * 1.5 + x",
            ]
            f.returns.append(v)
        else:  # an attribute tensor written in place and rebound across a break
            f.head += [
                f"{st}.t.{rng.choice(['add_(x)', 'mul_(2.0)', 'neg_()'])}",
                *_brk(rng, f"{st}.count"),
                f"{st}.t = {st}.t * 2.0 + y",
                f"{st}.count += 1",
                f"{t} = {st}.t - x",
            ]
        f.tensors[t] = 1
    f.returns.append(f"{st}.count")
    return f


# ---- in-place writes through views and aliases ---------------------------------------------------
_INPLACE_PRELUDE = [
    "class IvMod(torch.nn.Module):",
    "    def __init__(self, buf):",
    "        super().__init__()",
    "        self.register_buffer('buf', buf)",
    "    def forward(self, v):",
    "        self.buf.mul_(0.5).add_(v)",
    "        return v * self.buf",
]

_VIEWS = ["x[1:]", "x.view(-1)[:2]", "x.unsqueeze(0)[0]", "x.narrow(0, 0, 1)", "x[::2]", "y[-2:]"]
_INPLACE = [
    "add_(1.0)", "mul_(2.0)", "neg_()", "fill_(0.5)", "clamp_(-0.5, 0.5)", "sub_(x.sum() * 0.1)"
]  # fmt: skip


def inplace_views(rng: random.Random, k: str, avoid: frozenset[str]) -> Family:
    f = Family("inplace_views")
    name = _Names(k)
    f.prelude = list(_INPLACE_PRELUDE)
    mod = name("mod")
    buf = rng.choice(["y", "y.clone()", "x * 1.0"])  # y: the buffer is an argument
    f.params, f.make = [mod], [f"{mod} = IvMod({buf})"]
    for _ in range(rng.randint(2, 3)):
        form = rng.randrange(9)
        t, q = name("t"), name("q")
        if form == 0:  # a view of an input written in place, the base read back
            f.head += [f"{rng.choice(_VIEWS)}.{rng.choice(_INPLACE)}", f"{t} = x * 2.0 + y"]
        elif form == 1:  # out= into a fresh buffer, an input, or a view
            out = rng.choice(
                ["torch.empty_like(x)", "x", "y", "torch.empty(0)", "y[:]", "y.view(-1)"]
            )
            op = rng.choice(
                ["torch.add(x, y, out=OUT)", "torch.mul(x, 2.0, out=OUT)",
                 "torch.sin(y, out=OUT)", "torch.clamp(x, -1.0, 1.0, out=OUT)"]
            )  # fmt: skip
            f.head += [f"{q} = {out}", f"{t} = {op.replace('OUT', q)}", f"b{t} = {t} is {q}"]
            f.returns.append(f"b{t}")
        elif form == 2:  # slice, index and mask assignment
            f.head += [
                rng.choice(
                    ["x[::2] = y[::2]", "x[:1] = 0.0", "y[n % y.shape[0]] = x.sum()",
                     "x[x > 0] = 1.0", "x[torch.tensor([0])] += 1.0", "y[1:] = y[:-1].clone()"]
                ),  # fmt: skip
                f"{t} = x + y",
            ]
        elif form == 3:  # copy_/index_add_/masked_fill_ into inputs and views
            f.head += [
                rng.choice(
                    ["x[:2].copy_(y[:2])", "x.copy_(y.flip(0))", "y.index_add_(0, "
                     "torch.tensor([0, 1]), x[:2])", "x.masked_fill_(y > 0, -1.0)",
                     "y.addcmul_(x, x, value=0.5)"]
                ),  # fmt: skip
                f"{t} = x - y",
            ]
        elif form == 4:  # a module whose buffer (maybe an argument) is updated in place
            f.head += [f"{t} = {mod}({rng.choice(['x', 'y', 'x + 1.0'])})"]
            f.returns.append(f"{mod}.buf")
        elif form == 5:  # in-place metadata changes on a copy
            f.head += [
                f"{q} = x.clone()",
                f"{q}.unsqueeze_(0)",
                f"{q}.{rng.choice(['t_()', 'squeeze_(0)', 'transpose_(0, 1)'])}",
                f"{q}.mul_(2.0)",
                f"{t} = {q}.reshape(-1) + y",
            ]
        elif form == 6:  # a view of an intermediate written in place, the base used afterwards
            f.head += [
                f"{q} = x * 1.0",
                f"{q}.view(-1)[{rng.choice(['0', '-1', ':1'])}].{rng.choice(_INPLACE)}",
                f"{t} = {q} + 0.0",
            ]
        elif form == 7:  # a view of an input kept across a graph break, written after it
            f.head += [
                f"{q} = {rng.choice(_VIEWS)}",
                *_brk(rng, f"{q}.shape", unsupported=False),
                f"{q}.{rng.choice(_INPLACE)}",
                f"{t} = x + y",
            ]
            f.returns.append(q)
        else:  # a view held in a container, written through the container
            f.head += [
                f"{q} = {{'v': {rng.choice(_VIEWS)}, 'w': y}}",
                f"{q}['v'].{rng.choice(_INPLACE)}",
                *_brk(rng, "len(" + q + ")", unsupported=False),
                f"{q}['w'][:1].{rng.choice(_INPLACE)}",
                f"{t} = x * 2.0",
            ]
            f.returns.append(q)
        f.tensors[t] = 1
    if rng.random() < 0.6:  # autograd: in-place writes to views of non-leaf tensors, gradients
        w, wn, a, g = name("w"), name("wn"), name("a"), name("g")
        f.params += [w, wn]
        f.make += [
            f"{w} = (y * 0.5 + 0.1).detach().requires_grad_()",
            f"{wn} = {w} * 1.0",  # a non-leaf input that requires grad
        ]
        f.tail += [
            f"{a} = {w} * 2.0",
            rng.choice(
                [f"{a}[1:].mul_(x[1:])", f"{a}.view(-1).add_(x)", f"{a}[:1] = x[:1] * {w}[:1]",
                 f"{a}.unsqueeze(0).squeeze(0).sin_()", f"{a}.masked_fill_(x > 0, 0.0)"]
            ),  # fmt: skip
            rng.choice([f"{wn}.mul_(x)", f"{wn}[0] = 1.0", f"{wn}.add_({a})", f"{g} = {wn}"]),
            f"{g} = ({a} * {wn}).sum() + {a}",
        ]
        f.returns += [g, wn]
    return f


FLOW_FAMILIES = {
    "exceptions": exceptions,
    "break_spots": break_spots,
    "inplace_views": inplace_views,
}
