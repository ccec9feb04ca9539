"""Late construct families of session 10: calls that must fail as eager's do, and user classes.

``builtin_misuse``: builtins, ``math``/torch functions, user functions, methods, lambdas and
partials called with the wrong number of arguments, keywords they do not take, or arguments of
the wrong type (``isinstance(x, torch.Tensor, invalid=True)``, ``len(x, 1)``, ``getattr(o)``,
``int('1', bass=2)``, ``fz_two(x, c=y)``, ``x + 'a'``, ...), inside ``try``/``except`` around
tensor work and graph breaks: the program logs the exception's type and the class of its
message (``fz_msg``: "takes no keyword arguments" vs "missing a positional argument" ...), so a
compiled call that drops a keyword and returns a value, or raises another type, shows in
``LOG``. On some calls one such misuse escapes ``fn`` (type compared:
``EXPECTED_EXCEPTION_TYPES``). Valid keyword uses of the same builtins (``sorted(key=,
reverse=)``, ``max(default=)``, ``int(base=)``, ``print(sep=, end=)``) sit beside them.

``class_objects``: dataclasses (defaults, ``default_factory``, ``__post_init__``, frozen with
``replace`` and a caught ``FrozenInstanceError``, ``order=True`` sorted, ``asdict``/``astuple``/
``fields``), properties with setters and deleters that log, and a class with dunders
(``__add__``/``__radd__``/``__iadd__``/``__mul__``/``__neg__``, ``__len__``, ``__getitem__``/
``__setitem__``, ``__contains__``, ``__iter__``, ``__bool__`` on a tensor value, ``__call__``,
``__enter__``/``__exit__``, ``__eq__``, ``__repr__`` printed), a subclass overriding a dunder
through ``super()``, classmethods and staticmethods; objects made inside ``fn`` or passed in,
with graph breaks between making and using them.
"""

from __future__ import annotations

import random
import re

from .families import Family, _Names, _per_call

__all__ = ["CALL_FAMILIES"]


def _brk(rng: random.Random, what: str) -> list[str]:
    """A graph break (or none) at this point."""
    kind = rng.randrange(5)
    if kind == 0:
        return [f"print('brk', {what})"]
    if kind == 1:
        return ["torch._dynamo.graph_break()"]
    if kind == 2:
        return ["LOG.append(x.tolist())"]
    return []


# ---- builtin_misuse ------------------------------------------------------------------------------
_MISUSE_PRELUDE = [
    "import dataclasses",
    "def fz_msg(e):",
    "    s = str(e)",
    "    for key in ('keyword', 'positional', 'takes', 'missing', 'argument', 'not iterable',",
    "                'not subscriptable', 'unsupported operand', 'must be', 'object of type',",
    "                'invalid combination', 'not callable', 'unhashable', 'has no attribute',",
    "                'expected', '0-d', 'out of range', 'index', 'convert'):",
    "        if key in s:",
    "            return key",
    "    return 'other'",
    "class FzThing:",
    "    def __init__(self, v):",
    "        self.v = v",
    "    def scale(self, k):",
    "        return self.v * k",
    "def fz_two(a, b):",
    "    return a + b",
    "def fz_kwonly(a, *, b=1.0):",
    "    return a * b",
    "EXPECTED_EXCEPTION_TYPES = globals().get('EXPECTED_EXCEPTION_TYPES', ()) + ('TypeError',)",
]

# Each misuse raises eagerly for every input (the program logs what it raised; a compiled call
# that returns a value logs ('ok', type) instead).
_MISUSES = [
    "isinstance(x, torch.Tensor, invalid=True)",
    "isinstance(x, 3)",
    "isinstance(n, (str, 3))",
    "issubclass(x, torch.Tensor)",
    "len(x, 1)",
    "len(n)",
    "len(x.sum())",
    "abs(x, 1)",
    "abs('a')",
    "min()",
    "max(n)",
    "sum(lst, start=1.0, extra=2)",
    "sum(n)",
    "sorted(lst, cmp=None)",
    "sorted(n)",
    "getattr(o)",
    "getattr(o, 'v', 1, 2)",
    "getattr(o, 'nope')",
    "hasattr(o, 1)",
    "setattr(o, 'v')",
    "range('a')",
    "range(1, 2, 3, 4)",
    "range(n, step=1)",
    "int('1', bass=2)",
    "float(1, 2)",
    "float('a' + str(n))",
    "list(n)",
    "tuple(1, 2)",
    "dict(n)",
    "zip(n)",
    "enumerate(lst, start='a')",
    "iter(n)",
    "round(n, 'a')",
    "divmod(n)",
    "pow(n)",
    "bool(1, 2)",
    "any(n)",
    "all(lst, 1)",
    "callable()",
    "hash([n])",
    "chr('a')",
    "ord('ab')",
    "math.sqrt('a')",
    "math.floor()",
    "math.isclose(1.0)",
    "math.log(-1.0 - n)",
    "torch.add(x)",
    "x.add(1, 2, 3)",
    "x.view('a')",
    "x.sum(bogus=1)",
    "torch.cat(x)",
    "x.size(5)",
    "fz_two(x)",
    "fz_two(x, y, n)",
    "fz_two(x, c=y)",
    "fz_two(x, a=y)",
    "fz_kwonly(x, y)",
    "fz_kwonly(x, c=2.0)",
    "o.scale()",
    "o.scale(1, 2)",
    "o.scale(k=1, j=2)",
    "FzThing()",
    "FzThing(x, w=1)",
    "(lambda a: a)(x, y)",
    "functools.partial(fz_two, x)(y, n)",
    "x + 'a'",
    "n + None",
    "None < n",
    "{}[[n]]",
    "[1, 2][x]",
    "lst[n + 10]",
    "x[n, n, n]",
    "print(x, sepp='')",
    "type(1, 2)",
    "object(n)",
    "dataclasses.replace(o)",
    "lst.append()",
    "lst.pop(1, 2)",
    "{}.get()",
    "'a'.join(lst)",
    "max(lst, key=1)",
    "sorted(lst, key=lambda a, b: a)",
    "min(lst, default=0, bogus=1)",
    "dict(lst)",
    "next(n)",
    "str(n, 'utf-8')",
]

# Misuses that raise TypeError, let escape fn on some calls.
_ESCAPING = [m for m in _MISUSES if m.startswith(
    ("isinstance", "len(", "fz_", "getattr(o)", "sum(lst, start", "int('1'", "range("))]

# The same builtins used correctly with keywords: must keep their value.
_VALID = [
    "sorted(lst, key=abs, reverse=True)",
    "max(lst, default=0.0)",
    "min([], default=n)",
    "int('11', base=2) + n",
    "list(enumerate(lst, start=n))",
    "sum(lst, start=1.0)",
    "round(2.675, ndigits=2)",
    "divmod(n, 3)",
    "pow(2, n, 5)",
    "dict(a=n, **{'b': 2})",
    "getattr(o, 'nope', None)",
    "isinstance(x, (torch.Tensor, 3))",
    "max(lst, key=lambda a: -a)",
    "x.sum(dim=0, keepdim=True)",
    "torch.add(x, y, alpha=2)",
    "fz_kwonly(x, b=n)",
    "fz_two(b=x, a=y)",
    "functools.partial(fz_two, b=x)(y)",
]


def _unbind(e: str, ind: str, avoid: frozenset[str]) -> list[str]:
    """With ``--avoid exception_kept_alive``: the handler drops its exception itself (the
    break region's exit skips CPython's ``e = None; del e``, so the exception's traceback keeps
    the frame, and a generator suspended in it, alive: regressions/test_except_as_...)."""
    return [f"{ind}{e} = None"] if "exception_kept_alive" in avoid else []


def _msg(e: str, avoid: frozenset[str]) -> str:
    """``fz_msg`` of the exception, or with ``--avoid exception_kept_alive`` of its text (the
    compiled ``fz_msg`` guards on the exception's identity and holds it: regressions/
    test_exception_argument_not_kept_alive_by_guards.py)."""
    return f"fz_msg(str({e}))" if "exception_kept_alive" in avoid else f"fz_msg({e})"


def builtin_misuse(rng: random.Random, k: str, avoid: frozenset[str]) -> Family:
    f = Family("builtin_misuse")
    name = _Names(k)
    f.prelude = list(_MISUSE_PRELUDE)
    o = name("o")
    f.head.append(f"{o} = FzThing(x * 2.0)")
    escaped = False
    for _ in range(rng.randint(2, 4)):
        form = rng.randrange(5)
        t, q, e = name("t"), name("q"), name("e")
        bad = re.sub(r"\bo\b", o, rng.choice(_MISUSES))
        if form <= 1:  # caught: type and message class logged; tensor work and a break around
            f.head += [
                f"{t} = x + 1.0",
                *_brk(rng, t),
                "try:",
                f"    {t} = {t} * 2.0",
                f"    {q} = {bad}",
                f"    LOG.append(('ok', type({q}).__name__))",
                f"except Exception as {e}:",
                f"    LOG.append((type({e}).__name__, {_msg(e, avoid)}))",
                f"    {t} = {t} + y",
                *_unbind(e, "    ", avoid),
            ]
        elif form == 2:  # a valid keyword use beside the misuse, both logged
            good = re.sub(r"\bo\b", o, rng.choice(_VALID))
            f.head += [
                f"{q} = {good}",
                f"LOG.append(('valid', {q} if not isinstance({q}, torch.Tensor) "
                f"else {q}.tolist()))",
                *_brk(rng, "n"),
                f"{t} = y * 2.0",
                "try:",
                f"    LOG.append(('ok', type({bad}).__name__))",
                f"except Exception as {e}:",
                f"    LOG.append((type({e}).__name__, {_msg(e, avoid)}))",
                f"    {t} = {t} - x",
                *_unbind(e, "    ", avoid),
            ]
        elif form == 3:  # in a helper called from a loop: the error crosses a frame
            h = name("h")
            f.prelude += [
                f"def {h}(v, i, {o}, x, y, n, lst):",
                "    if i == 1:",
                f"        return {bad}",
                "    return v * 2.0",
            ]
            f.head += [f"{t} = x * 1.0"]
            f.head += [
                f"for i{t} in range(3):",
                "    try:",
                f"        {t} = {h}({t}, i{t}, {o}, x, y, n, lst)",
                f"    except Exception as {e}:",
                f"        LOG.append((i{t}, type({e}).__name__, {_msg(e, avoid)}))",
                *_unbind(e, "        ", avoid),
                *["    " + s for s in _brk(rng, f"i{t}")],
            ]
        elif form == 4 and not escaped:  # escapes fn on some calls, after side effects
            escaped = True
            escaping = re.sub(r"\bo\b", o, rng.choice(_ESCAPING))
            f.head += [
                f"{t} = x - y",
                "LOG.append(('before', n))",
                *_brk(rng, t),
                f"if n {rng.choice(['> 2', '% 2 == 0', '< 4'])}:",
                f"    {q} = {escaping}",
                f"    LOG.append(('not raised', type({q}).__name__))",
            ]
        else:  # a TypeError from a wrong type in tensor arithmetic, caught
            f.head += [
                f"{t} = x * 3.0",
                "try:",
                f"    {t} = {t} + "
                + rng.choice(["None", repr("s"), "[1, 2]", "{1: 2}", "object()"]),
                f"except TypeError as {e}:",
                f"    LOG.append(('TypeError', {_msg(e, avoid)}))",
                f"    {t} = {t} - 1.0",
            ]
        f.tensors[t] = 1
    return f


# ---- class_objects -------------------------------------------------------------------------------
_CLASS_PRELUDE = [
    "import dataclasses",
    "@dataclasses.dataclass",
    "class FzPoint:",
    "    a: torch.Tensor",
    "    k: int = 1",
    "    tags: list = dataclasses.field(default_factory=list)",
    "    def __post_init__(self):",
    "        self.tags.append('init')",
    "    def norm(self):",
    "        return self.a * self.k",
    "@dataclasses.dataclass(frozen=True)",
    "class FzFrozen:",
    "    s: float",
    "    n: int = 0",
    "    def bumped(self):",
    "        return dataclasses.replace(self, n=self.n + 1)",
    "@dataclasses.dataclass(order=True)",
    "class FzOrd:",
    "    key: int",
    "    val: float = 0.0",
    "class FzVec:",
    "    count = 0",
    "    def __init__(self, t):",
    "        self.t = t",
    "        self.hits = 0",
    "        self._scale = 1.0",
    "        FzVec.count += 1",
    "    def __add__(self, o):",
    "        return type(self)(self.t + (o.t if isinstance(o, FzVec) else o))",
    "    def __radd__(self, o):",
    "        return type(self)(self.t + o)",
    "    def __iadd__(self, o):",
    "        self.t = self.t + o",
    "        self.hits += 1",
    "        return self",
    "    def __mul__(self, o):",
    "        return type(self)(self.t * o)",
    "    def __neg__(self):",
    "        return type(self)(-self.t)",
    "    def __len__(self):",
    "        return self.t.shape[0]",
    "    def __getitem__(self, i):",
    "        return self.t[i]",
    "    def __setitem__(self, i, v):",
    "        self.t[i] = v",
    "    def __contains__(self, v):",
    "        return bool((self.t == v).any())",
    "    def __iter__(self):",
    "        return iter(self.t.tolist())",
    "    def __bool__(self):",
    "        return bool(self.t.sum() > 0)",
    "    def __call__(self, s):",
    "        return self.t * s",
    "    def __eq__(self, o):",
    "        return isinstance(o, FzVec) and torch.equal(self.t, o.t)",
    "    __hash__ = None",
    "    def __repr__(self):",
    "        return 'FzVec(%d, hits=%d)' % (self.t.shape[0], self.hits)",
    "    def __enter__(self):",
    "        LOG.append(('enter', self.hits))",
    "        return self.t",
    "    def __exit__(self, *exc):",
    "        LOG.append(('exit', exc[0] is None))",
    "        return False",
    "    @property",
    "    def total(self):",
    "        LOG.append('total')",
    "        return self.t.sum()",
    "    @property",
    "    def scale(self):",
    "        LOG.append(('get scale', self._scale))",
    "        return self._scale",
    "    @scale.setter",
    "    def scale(self, v):",
    "        LOG.append(('set scale', v))",
    "        self._scale = v",
    "        self.t = self.t * v",
    "    @scale.deleter",
    "    def scale(self):",
    "        LOG.append('del scale')",
    "        self._scale = 1.0",
    "    @classmethod",
    "    def ones_like(cls, t):",
    "        return cls(torch.ones_like(t))",
    "    @staticmethod",
    "    def mix(a, b):",
    "        return a * 0.5 + b",
    "class FzChild(FzVec):",
    "    def __mul__(self, o):",
    "        LOG.append('child mul')",
    "        return super().__mul__(o * 2.0)",
    "    def __len__(self):",
    "        return super().__len__() + 1",
]

_FORMS = 12


def class_objects(rng: random.Random, k: str, avoid: frozenset[str]) -> Family:
    f = Family("class_objects")
    name = _Names(k)
    f.prelude = list(_CLASS_PRELUDE)
    arg = name("v")
    f.params, f.make = [arg], [
        f"{arg} = {rng.choice(['FzVec', 'FzChild'])}"
        f"(x * {_per_call(rng, ['1.0', '-1.0', '0.5'])}[call])"
    ]
    for _ in range(rng.randint(2, 4)):
        form = rng.randrange(_FORMS)
        t, q, v = name("t"), name("q"), name("v")
        cls = rng.choice(["FzVec", "FzChild"])
        if form == 0:  # arithmetic dunders on a fresh object and the argument, across a break
            f.head += [
                f"{v} = {cls}(x * 1.5)",
                f"{v} = {v} + {arg}",
                *_brk(rng, v),
                f"{v} = -({v} * 2.0) + y",
                f"{v} = 1.0 + {v}",
                f"{t} = {v}.t",
                f"{q} = repr({v})",
            ]
        elif form == 1:  # __iadd__ on the argument (mutates it), hits counted
            f.head += [
                f"{arg} += y",
                *_brk(rng, f"{arg}.hits"),
                f"{arg} += 1.0",
                f"{t} = {arg}.t * 1.0",
                f"{q} = {arg}.hits",
            ]
        elif form == 2:  # container dunders: len, getitem, setitem, contains, iter
            f.head += [
                f"{v} = {cls}(y * 1.0)",
                f"{v}[0] = {rng.choice(['2.0', 'x[0]', 'n'])}",
                f"{q} = (len({v}), 2.0 in {v}, {v}[-1].item())",
                *_brk(rng, q),
                f"{t} = {v}.t + sum(e for e in {v})",
            ]
        elif form == 3:  # __bool__ on a tensor value, __call__, __eq__
            f.head += [
                f"{v} = {cls}(x - y)",
                f"if {v}:",
                f"    {t} = {v}(2.0)",
                "else:",
                f"    {t} = {v}(-1.0)",
                f"{q} = ({v} == {arg}, {v} == {cls}(x - y), {v} != 3)",
            ]
        elif form == 4:  # a property with a setter and a deleter that log, across a break
            f.head += [
                f"{q} = {arg}.scale",
                f"{arg}.scale = {rng.choice(['2.0', 'n + 0.5', '-1.0'])}",
                *_brk(rng, f"{arg}.scale"),
                f"{t} = {arg}.t + {arg}.total",
                f"del {arg}.scale",
                f"{q} = ({q}, {arg}.scale)",
            ]
        elif form == 5:  # a user context manager returning a tensor, a break in its block
            f.head += [
                f"{v} = {cls}(y + 1.0)",
                f"with {v} as {t}:",
                f"    {t} = {t} * 2.0",
                *["    " + s for s in _brk(rng, t)],
                f"    {v}.hits += 1",
                f"{q} = {v}.hits",
            ]
        elif form == 6:  # a dataclass: default_factory, __post_init__, fields, asdict
            f.head += [
                f"{v} = FzPoint(x * 2.0, k=n + 1)",
                f"{v}.tags.append(n)",
                *_brk(rng, f"{v}.tags"),
                f"{t} = {v}.norm() + y",
                f"{q} = ([fl.name for fl in dataclasses.fields({v})], list({v}.tags), "
                f"len(dataclasses.asdict({v})), {v}.k)",
            ]
        elif form == 7:  # a frozen dataclass: replace, hash, eq, a caught FrozenInstanceError
            f.head += [
                f"{v} = FzFrozen(float(n) * 0.5, n)",
                f"{v} = {v}.bumped()",
                "try:",
                f"    {v}.n = 7",
                "except dataclasses.FrozenInstanceError as e:",
                "    LOG.append(('frozen', type(e).__name__))",
                *_brk(rng, v),
                f"{q} = ({v}.n, {v} == FzFrozen(float(n) * 0.5, n + 1), "
                f"hash({v}) == hash(FzFrozen({v}.s, {v}.n)), repr({v}), dataclasses.astuple({v}))",
                f"{t} = x * {v}.s + {v}.n",
            ]
        elif form == 8:  # an order=True dataclass sorted by its generated __lt__
            f.head += [
                f"{v} = sorted([FzOrd(n % 3, 1.0), FzOrd(1, -1.0), FzOrd(n, 0.5), FzOrd(1, 2.0)])",
                f"{q} = [(o.key, o.val) for o in {v}] + [FzOrd(1) < FzOrd(2), max({v}).key]",
                *_brk(rng, "len(" + v + ")"),
                f"{t} = y * {v}[0].val + {v}[-1].key",
            ]
        elif form == 9:  # classmethod, staticmethod, a class attribute counter
            f.head += [
                f"{v} = {cls}.ones_like(x)",
                f"{t} = {cls}.mix({v}.t, y) + {arg}.mix(x, 1.0)",
                *_brk(rng, t),
                f"{q} = ({cls}.count > 0, type({v}).__name__, isinstance({v}, FzVec))",
            ]
        elif form == 10:  # the subclass's dunder through super(), and len through super()
            f.head += [
                f"{v} = FzChild(x + 0.5)",
                f"{v} = {v} * 3.0",
                *_brk(rng, v),
                f"{t} = {v}.t",
                f"{q} = (len({v}), len({arg}), type({v} * 1.0).__name__)",
            ]
        else:  # an object stored in a list and a dict, mutated there, read back after a break
            f.head += [
                f"{v} = [{cls}(x), {arg}]",
                f"{q} = {{'a': {v}[0]}}",
                f"{q}['a'].t = {q}['a'].t * 2.0",
                f"{v}[1].hits += 5",
                *_brk(rng, "len(" + v + ")"),
                f"{t} = {v}[0].t + {v}[1].t",
                f"{q} = ({arg}.hits, {q}['a'] is {v}[0])",
            ]
        f.tensors[t] = 1
        f.returns.append(q)
    return f


CALL_FAMILIES = {"builtin_misuse": builtin_misuse, "class_objects": class_objects}
