"""Construct families: program pieces aimed at one class of compiler bug each (issue 18).

A family adds module-level code (classes, per-call value tables), extra parameters of ``fn``
(built by the program's ``extra_args(call, x, y, n)`` afresh for each call, so they can alias
``x``/``y`` and can change kind between calls), statements at the start of ``fn`` (whose rank-0/1
tensors and ints join the generic grammar's scope) or at its end (autograd: nothing may write
in place to what backward needs afterwards), and names to return.

Every family's code runs eagerly without raising for every call (the generator's promise), so a
difference from eager is the compiler's. One function per family; ``FAMILIES`` lists them.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["FAMILIES", "Family"]

CALLS = 4  # the runner's calls per program (generator.generate_inputs)


@dataclass
class Family:
    """What one family adds to a program (lines of ``head``/``tail`` are relative to fn's body)."""

    name: str
    prelude: list[str] = field(default_factory=list)
    params: list[str] = field(default_factory=list)
    make: list[str] = field(default_factory=list)
    head: list[str] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)
    returns: list[str] = field(default_factory=list)
    tensors: dict[str, int] = field(default_factory=dict)  # joins the scope: name -> rank
    ints: list[str] = field(default_factory=list)
    entry_method: bool = False  # fn is a method of a subclass (zero-argument super())


class _Names:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.n = 0

    def __call__(self, kind: str) -> str:
        self.n += 1
        return f"{kind}{self.prefix}{self.n}"


def _per_call(rng: random.Random, pool: list[str], repeat_first: float = 0.3) -> str:
    """A per-call table: each call draws from ``pool``; the second call often repeats the
    first (a cache hit that must still be right after the first call's special value)."""
    values = [rng.choice(pool) for _ in range(CALLS)]
    if rng.random() < repeat_first:
        values[1] = values[0]
    return "[" + ", ".join(values) + "]"


def _form(rng: random.Random, n: int, avoid: frozenset[str], banned: dict[str, set[int]]) -> int:
    """A form ``0..n-1``, never one of an avoided construct's forms."""
    skip = set().union(*(forms for name, forms in banned.items() if name in avoid))
    return rng.choice([i for i in range(n) if i not in skip] or [n - 1])


def _if(cond: str, then: str, other: str) -> list[str]:
    return [f"if {cond}:", f"    {then}", "else:", f"    {other}"]


# ---- Python scalars: NaN/inf/-0.0 and bool/int/float that change between calls ---------------
_SCALARS = [
    "float('nan')", "2.0", "2", "True", "False", "-0.0", "0.0", "float('inf')",
    "float('-inf')", "1", "0", "-3", "0.5",
]  # fmt: skip


def special_scalars(rng: random.Random, k: str, avoid: frozenset[str]) -> Family:
    f = Family("special_scalars")
    name = _Names(k)
    s = name("s")
    table = f"S_{s.upper()}"
    pool = [v for v in _SCALARS if "nan_scalar" not in avoid or "nan" not in v]
    f.prelude = [f"{table} = {_per_call(rng, pool)}"]
    f.params, f.make = [s], [f"{s} = {table}[call]"]
    for _ in range(rng.randint(2, 4)):
        form = _form(rng, 12, avoid, {"scalar_kind_query": {3, 4, 7, 8}})
        t, q = name("t"), name("q")
        if form == 0:
            f.head.append(f"{t} = x * {s}")
        elif form == 1:
            f.head += _if(f"{s} > 0.5", f"{t} = x + 1.0", f"{t} = x - 1.0")
        elif form == 2:
            f.head += _if(f"{s} != {s}", f"{t} = x * 0.0", f"{t} = y + 0.0")
        elif form == 3:
            f.head += [
                f"if isinstance({s}, bool):",
                f"    {q} = 1",
                f"elif isinstance({s}, int):",
                f"    {q} = 2",
                "else:",
                f"    {q} = 3",
            ]
            f.returns.append(q)
            continue
        elif form == 4:
            f.head.append(f"{q} = math.copysign(1.0, {s})")
            f.returns.append(q)
            continue
        elif form == 5:
            f.head.append(f"{t} = torch.clamp(x, {rng.choice(['max', 'min'])}={s})")
        elif form == 6:
            f.head.append(f"{t} = torch.full_like(x, {s})")
        elif form == 7:
            f.head.append(f"print('s', {s}, type({s}).__name__)")
            continue
        elif form == 8:
            f.head.append(f"{q} = {s} + {rng.choice(['1', '0.5', 'n'])}")
            f.returns.append(q)
            continue
        elif form == 9:
            f.head += _if(f"{s}", f"{t} = x * 2.0", f"{t} = y * 3.0")
        elif form == 10:
            f.head.append(f"{t} = torch.where(x > {s}, x, y)")
        else:
            f.head.append(f"{t} = x.add({s}) * {s}")
        f.tensors[t] = 1
    return f


# ---- overlapping and aliased inputs and outputs ------------------------------------------------
_ALIAS_PAIRS = [
    ("base[:4]", "base[2:]"),  # overlapping slices of one base
    ("base", "base"),  # one tensor passed twice
    ("base.view(2, 3)[0]", "base[1:4]"),
    ("base.as_strided((4,), (1,), 1)", "base.as_strided((3,), (2,), 0)"),
    ("base.detach()", "base[3:]"),
    ("base[::2]", "base[1:]"),
]


_ALIAS_BUGS = {
    "identity_inplace": {2, 3, 4},  # issue 18 item 8
    "detach_alias": {5},  # item 11
    "as_strided_write": {6},  # item 12
    "set_resize": {7, 8},  # item 16
}


def aliasing(rng: random.Random, k: str, avoid: frozenset[str]) -> Family:
    f = Family("aliasing")
    name = _Names(k)
    base, a, b, c = name("base"), name("a"), name("b"), name("c")
    pa, pb = rng.choice(_ALIAS_PAIRS)
    expand = rng.random() < 0.2
    if expand:  # an expanded view is read-only (writes to it raise in eager)
        pa = "base[:1].expand(4)"
    f.params = [base, a, b, c]
    f.make = [
        "base = torch.linspace(-1.0, 1.5, 6)",
        f"{base}, {a}, {b} = base, {pa}, {pb}",
        f"{c} = torch.tensor([0.5, -1.0, 2.0])",
    ]
    writable = [b] if expand else [a, b]
    for _ in range(rng.randint(2, 4)):
        form = _form(rng, 11, avoid, _ALIAS_BUGS)
        w = rng.choice(writable)
        other = a if w == b else b
        t, q = name("t"), name("q")
        if form == 0:
            f.head += [
                f"{w}.{rng.choice(['add_(1.0)', 'mul_(2.0)', 'neg_()'])}",
                f"{t} = {other} * 2.0",
            ]
            f.returns.append(t)
        elif form == 1:
            f.head += [f"{w}[0] = {rng.choice(['5.0', 'x.sum()', other + '[-1]'])}"]
        elif form == 2:
            f.head += [f"{q} = {w}.add_(1.0)", f"{t} = {q} is {w}"]
            f.returns += [t]
        elif form == 3:
            f.head += [f"z{t} = {w}", f"z{t} += 1.0", f"{q} = z{t} is {w}"]
            f.returns += [q, f"z{t}"]
        elif form == 4:
            f.head += [
                f"{q} = torch.relu_({w}) if {rng.choice(['True', 'n > 2'])} else {w}",
                f"{t} = ({q} is {w}, {q} is {other})",
            ]
            f.returns += [t]
        elif form == 5:
            f.head += [f"{t} = {rng.choice([*writable, base])}.detach()"]
            if rng.random() < 0.5:
                f.head.append(f"{t}.add_(1.0)")
            f.returns.append(t)
        elif form == 6:  # writes through as_strided windows at moving offsets
            f.head += [
                f"for k{t} in range(3):",
                f"    {base}.as_strided((3,), (1,), k{t}).add_(1.0)",
            ]
        elif form == 7:
            f.head += [f"{c}.set_({rng.choice([*writable, base])})", f"{c}.mul_(0.5)"]
            f.returns.append(c)
        elif form == 8:
            f.head += [f"{c}.resize_({rng.choice(['2', '1', '(1, 1)'])})", f"{t} = {c} * 2.0"]
            f.returns += [t, c]
        elif form == 9:
            f.head += [f"{t} = {rng.choice([a, b])}.sum() + {other}.sum()"]
            f.tensors[t] = 0
        else:
            f.head += [f"{t} = {rng.choice([a, b, base])}.expand(2, -1)", f"{q} = {t}.sum(0)"]
            f.returns.append(q)
    if rng.random() < 0.5:  # x passed twice: the generic statements write and read both
        xx = name("xx")
        f.params.append(xx)
        f.make.append(f"{xx} = x")
        f.tensors[xx] = 1
    f.returns += [a, b]
    return f


# ---- container subclasses and module containers --------------------------------------------------
def containers(rng: random.Random, k: str, avoid: frozenset[str]) -> Family:
    f = Family("containers")
    name = _Names(k)
    c = name("c")
    kinds = _per_call(rng, ["'my'", "'plain'"], 0.0)
    kind = rng.choice(["list", "dict", "tuple", "module"])
    if kind == "module" and "module_truthiness" in avoid:
        kind = "tuple"
    if kind != "module" and "container_subclass" in avoid:
        kind = "module" if "module_truthiness" not in avoid else "tuple"
    table = f"C_{c.upper()}"
    f.prelude = [f"{table} = {kinds}"]
    f.params = [c]
    t, q = name("t"), name("q")
    if kind == "list":
        f.prelude += [
            "class MyList(list):",
            "    def __getitem__(self, i):",
            "        return list.__getitem__(self, i) * 2.0",
            "    def total(self):",
            "        return sum(self)",
        ]
        f.make = [f"{c} = MyList([1.0, -0.5, 2.0]) if {table}[call] == 'my' else [1.0, -0.5, 2.0]"]
        f.head = [
            *_if(f"isinstance({c}, MyList)", f"{t} = x + {c}.total()", f"{t} = x - len({c})"),
            f"{t} = {t} * {c}[0]",
            f"{c}.append(0.25)",
        ]
    elif kind == "dict":
        f.prelude += [
            "class MyDict(dict):",
            "    def __missing__(self, key):",
            "        return 3.0",
        ]
        f.make = [f"{c} = MyDict(a=1.5) if {table}[call] == 'my' else {{'a': 1.5, 'b': -1.0}}"]
        f.head = [f"{t} = x * {c}['a'] + {c}['b']", f"{c}['n'] = 2.0", f"{q} = sorted({c})"]
        f.returns.append(q)
    elif kind == "tuple":
        f.prelude += [
            "class MyTuple(tuple):",
            "    def __len__(self):",
            "        return 7",
            "Pair = collections.namedtuple('Pair', 'a b')",
        ]
        f.make = [
            f"{c} = {{'my': MyTuple((1.0, 2.0)), 'plain': (1.0, 2.0)}}[{table}[call]]"
            if rng.random() < 0.5
            else f"{c} = Pair(1.0, 2.0) if {table}[call] == 'my' else (1.0, 2.0)"
        ]
        f.head = [f"{t} = x * len({c}) + {c}[1]", f"{q} = type({c}).__name__"]
        f.returns.append(q)
    else:
        f.make = [
            f"{c} = torch.nn.{rng.choice(['Sequential', 'ModuleList'])}"
            f"([torch.nn.Identity()] if {table}[call] == 'my' else [])"
        ]
        f.make[0] = f.make[0].replace("Sequential([", "Sequential(*[")
        f.head = [*_if(f"{c}", f"{t} = x + 1.0", f"{t} = x - 1.0"), f"{q} = len({c})"]
        f.returns.append(q)
    f.tensors[t] = 1
    if kind != "module":
        f.head += _if(f"type({c}) is {kind}", f"{t} = {t} * 2.0", f"{t} = {t} + 0.5")
    return f


# ---- __torch_function__ tensor subclass ----------------------------------------------------------
def tensor_subclass(rng: random.Random, k: str, avoid: frozenset[str]) -> Family:
    f = Family("tensor_subclass")
    name = _Names(k)
    u, t, q = name("u"), name("t"), name("q")
    cls = rng.choice(["MyT", "LogT"])
    if "torch_function_log" in avoid:
        cls = "MyT"
    table = f"U_{u.upper()}"
    f.prelude = [
        "class MyT(torch.Tensor):",
        "    pass",
        "class LogT(torch.Tensor):",
        "    @classmethod",
        "    def __torch_function__(cls, func, types, args=(), kwargs=None):",
        "        LOG.append('tf')",
        "        return super().__torch_function__(func, types, args, kwargs or {})",
        f"{table} = {_per_call(rng, ['True', 'False'], 0.0)}",
    ]
    f.params = [u]
    f.make = [f"{u} = y.clone().as_subclass({cls}) if {table}[call] else y.clone()"]
    f.head = [
        f"{t} = {rng.choice([f'{u} * 2.0', f'torch.add({u}, x)', f'{u}.sin() + x'])}",
        *_if(f"isinstance({u}, {cls})", f"{q} = 'sub'", f"{q} = type({u}).__name__"),
    ]
    f.returns += [t, q]
    if rng.random() < 0.5:
        f.head.append(f"{u}.mul_(0.5)")
    return f


# ---- descriptors, properties and __getattr__ with side effects ----------------------------------
_OBJ_CLASS = [
    "class Desc:",
    "    def __get__(self, obj, owner=None):",
    "        LOG.append('desc_get')",
    "        return 2.0 if obj is None else obj.v * 2",
    "    def __set__(self, obj, value):",
    "        LOG.append('desc_set')",
    "        obj.__dict__['dv'] = value",
    "class Obj:",
    "    d = Desc()",
    "    def __init__(self, v):",
    "        self.v = v",
    "        self.hits = 0",
    "    @property",
    "    def scale(self):",
    "        LOG.append('scale')",
    "        self.hits += 1",
    "        return self.v",
    "    def __getattr__(self, name):",
    "        LOG.append('getattr ' + name)",
    "        return 1.5",
]


def side_effect_attrs(rng: random.Random, k: str, avoid: frozenset[str]) -> Family:
    f = Family("side_effect_attrs")
    name = _Names(k)
    o = name("o")
    table = f"V_{o.upper()}"
    cls_lines = _OBJ_CLASS[:-3] if "getattr_probe" in avoid else _OBJ_CLASS
    f.prelude = [*cls_lines, f"{table} = {_per_call(rng, ['0.5', '2.0', '-1.0', '3'])}"]
    f.params, f.make = [o], [f"{o} = Obj({table}[call])"]
    for _ in range(rng.randint(2, 4)):
        t, q = name("t"), name("q")
        form = _form(
            rng,
            6,
            avoid,
            {"getattr_probe": {1, 4}, "hasattr_probe": {4}, "class_descriptor": {5},
             "instance_descriptor": {2}},
        )
        if form == 0:
            f.head.append(f"{t} = x * {o}.scale")
        elif form == 1:
            f.head.append(f"{t} = x + {o}.{rng.choice(['missing', 'other'])}")
        elif form == 2:
            f.head += [f"{o}.d = {rng.choice(['3.0', 'n', 'x.sum()'])}", f"{t} = x * {o}.d"]
        elif form == 3:
            f.head += _if(f"{o}.scale > 1.0", f"{t} = x * 2.0", f"{t} = y - 1.0")
        elif form == 4:
            f.head += [f"{o}.hits += 1", f"{q} = hasattr({o}, 'nothing')"]
            f.returns.append(q)
            continue
        else:
            f.head.append(f"{t} = x * Obj.d")
        f.tensors[t] = 1
    return f


# ---- functools.partial whose keywords change between calls ---------------------------------------
def partials(rng: random.Random, k: str, avoid: frozenset[str]) -> Family:
    f = Family("partials")
    name = _Names(k)
    p, t, q = name("p"), name("t"), name("q")
    table = f"P_{p.upper()}"
    kws = ["{'a': 3.0}", "{'a': 3.0, 'b': 5.0}", "{'b': -1.0}", "{}", "{'a': 2}"]
    f.prelude = [
        "def pg(x, a=1.0, b=2.0):",
        "    return x * a + b",
        f"{table} = {_per_call(rng, kws)}",
    ]
    f.params, f.make = [p], [f"{p} = functools.partial(pg, **{table}[call])"]
    f.head = [f"{t} = {rng.choice([f'{p}(x)', f'{p}(x, b=0.5)', f'{p}(y) * {p}(x)'])}"]
    if rng.random() < 0.5:
        f.head.append(f"{q} = sorted({p}.keywords)")
        f.returns.append(q)
    f.tensors[t] = 1
    return f


# ---- layouts and folded tensor queries -----------------------------------------------------------
_LAYOUT_BUGS = {
    "class_descriptor": "a descriptor read on the class (Obj.d) whose __get__ has side effects",
    "instance_descriptor": "o.d = v; o.d through a data descriptor whose __get__ has side effects",
    "channels_last_query": {0, 7},  # issue 18 item 6
    "storage_offset": {2, 3, 9},  # item 5
    "size_stride_kw": {3, 4},  # item 9
    "float_tensor_isinstance": {6},  # item 10
}


def layouts(rng: random.Random, k: str, avoid: frozenset[str]) -> Family:
    f = Family("layouts")
    name = _Names(k)
    z, o, d = name("z"), name("o"), name("d")
    zt, ot, dt = f"Z_{z.upper()}", f"O_{o.upper()}", f"D_{d.upper()}"
    f.prelude = [
        f"{zt} = {_per_call(rng, ['0', '1', '2'])}",
        f"{ot} = {_per_call(rng, ['0', '1', '3', '5'])}",
        f"{dt} = {_per_call(rng, ['torch.float32', 'torch.float64', 'torch.int64'])}",
    ]
    f.params = [z, o, d]
    f.make = [
        "zb = torch.arange(24, dtype=torch.float32).reshape(2, 3, 2, 2)",
        f"{z} = [zb, zb.contiguous(memory_format=torch.channels_last), zb.transpose(2, 3)]"
        f"[{zt}[call]]",
        f"{o} = torch.linspace(-2.0, 2.0, 20)[{ot}[call]:{ot}[call] + x.shape[0]]",
        f"{d} = torch.arange(3).to({dt}[call])",
    ]
    f.tensors[o] = 1
    for _ in range(rng.randint(2, 4)):
        t, q = name("t"), name("q")
        form = _form(rng, 10, avoid, _LAYOUT_BUGS)
        if form == 0:
            f.head += _if(
                f"{z}.is_contiguous(memory_format=torch.channels_last)",
                f"{t} = x + 2.0",
                f"{t} = x + 3.0",
            )
        elif form == 1:
            f.head += _if(f"{z}.is_contiguous()", f"{t} = x * 2.0", f"{t} = x - 1.0")
        elif form == 2:
            f.head += _if(f"{o}.storage_offset() > 2", f"{t} = {o} * 2.0", f"{t} = {o} - x")
        elif form == 3:
            f.head.append(f"{q} = {o}.storage_offset() + {z}.stride({rng.choice(['1', 'dim=0'])})")
            f.ints.append(q)
            f.returns.append(q)
            continue
        elif form == 4:
            f.head.append(
                f"{q} = ({z}.stride(), {z}.size(dim=1), {z}.size(1), {z}.dim(), "
                f"{o}.is_contiguous())"
            )
            f.returns.append(q)
            continue
        elif form == 5:
            f.head += _if(f"{d}.is_floating_point()", f"{q} = {d} * 2", f"{q} = {d} + 1")
            f.returns.append(q)
            continue
        elif form == 6:
            f.head.append(
                f"{q} = (isinstance({d}, torch.FloatTensor), {d}.dtype, {d}.element_size())"
            )
            f.returns.append(q)
            continue
        elif form == 7:
            f.head += [f"{q} = {z} * 2.0 + 1.0", f"{t} = {q}.sum() + x"]
            f.returns.append(f"{q}.is_contiguous(memory_format=torch.channels_last)")
        elif form == 8:
            f.head += [f"{o}.{rng.choice(['add_(1.0)', 'mul_(0.5)'])}", f"{t} = {o} + y"]
        else:
            f.head += [f"{t} = x[1:] if x.shape[0] > 1 else x", f"{q} = {t}.storage_offset()"]
            f.returns.append(q)
            continue
        f.tensors[t] = 1
    return f


# ---- grad-mode statements ------------------------------------------------------------------------
def grad_mode(rng: random.Random, k: str, avoid: frozenset[str]) -> Family:
    f = Family("grad_mode")
    name = _Names(k)
    w = name("w")
    f.params, f.make = [w], [f"{w} = torch.full_like(x, 0.5).requires_grad_()"]
    lines: list[str] = []
    for _ in range(rng.randint(2, 4)):
        t, q = name("t"), name("q")
        form = _form(rng, 7, avoid, {"grad_mode_stmt": {0}})
        if form == 0:
            lines.append(f"torch.set_grad_enabled({rng.choice(['False', 'True', 'n > 2'])})")
        elif form == 1:
            lines += ["with torch.no_grad():", f"    {t} = x * {w}"]
            f.returns.append(t)
        elif form == 2:
            lines += ["with torch.enable_grad():", f"    {t} = y * {w}"]
            f.returns.append(t)
        elif form == 3:
            lines.append(f"{q} = torch.is_grad_enabled()")
            f.returns.append(q)
        elif form == 4:
            lines += _if("torch.is_grad_enabled()", f"{t} = x + {w}", f"{t} = x - {w}")
            f.returns.append(t)
        elif form == 5:
            lines += [
                f"with torch.set_grad_enabled({rng.choice(['False', 'True'])}):",
                f"    {t} = torch.sin({w}) * y",
            ]
            f.returns.append(t)
        else:
            lines.append(f"{t} = ({w} * x).sum()")
            f.returns.append(t)
    if rng.random() < 0.5 and "grad_mode_stmt" not in avoid:
        lines.append("torch.set_grad_enabled(False)")  # grad mode stays off after the call
    f.tail = lines
    if rng.random() < 0.5 and "no_grad_calls" not in avoid:
        # some calls under no_grad: enable_grad blocks and statements then switch it on inside
        # (issue 18 item 15), and the recompile for the other entry mode is exercised
        calls = sorted(rng.sample(range(CALLS), rng.randint(1, 2)))
        f.prelude = [f"NO_GRAD_CALLS = {tuple(calls)!r}"]
    return f


# ---- .data writes on leaves that require grad ----------------------------------------------------
def data_writes(rng: random.Random, k: str, avoid: frozenset[str]) -> Family:
    f = Family("data_writes")
    name = _Names(k)
    w, t = name("w"), name("t")
    f.params, f.make = [w], [f"{w} = torch.linspace(-1.0, 1.0, x.shape[0]).requires_grad_()"]
    ops = [
        f"{w}.data.mul_(0.5)",
        f"{w}.data.add_(x)",
        f"{w}.data = {w}.data * 2.0",
        f"{w}.data.copy_(y)",
        f"with torch.no_grad():\n    {w}.mul_(0.9).add_(x, alpha=0.1)",
        f"with torch.no_grad():\n    {w}.sub_({w} * 0.5)",
    ]
    body = [rng.choice(ops) for _ in range(rng.randint(1, 3))]
    f.tail = [line for op in body for line in op.split("\n")]
    f.tail.append(f"{t} = x * {w}")
    f.returns += [t, w]
    return f


# ---- requires_grad inputs, backward in and after the call ----------------------------------------
def backward(rng: random.Random, k: str, avoid: frozenset[str]) -> Family:
    f = Family("backward")
    name = _Names(k)
    w, t, g = name("w"), name("t"), name("g")
    scalar = rng.random() < 0.4
    f.params = [w]
    f.make = [
        f"{w} = torch.tensor(0.7, requires_grad=True)"
        if scalar
        else f"{w} = (y * 0.5 + 0.1).detach().requires_grad_()"
    ]
    expr = rng.choice(
        [
            f"torch.sin(x * {w}) + y * {w}",
            f"torch.tanh({w}) * x - {w} * {w}",
            f"torch.where(x > 0, x * {w}, {w} / (y.abs() + 1.0))",
            f"torch.relu({w} + x).sum() * y",
            f"(x * {w}).amax() + torch.sigmoid(y * {w})",
        ]
    )
    f.tail = [f"{t} = {expr}"]
    form = _form(rng, 4, avoid, {"backward_in_fn": {0, 1, 2}})
    if form == 0:  # backward inside fn frees the graph: t is returned detached
        f.tail += [f"{t}.sum().backward()", f"{g} = {w}.grad.clone()", f"{t} = {t}.detach()"]
        f.returns.append(g)
    elif form == 1:  # double backward: the runner's backward goes through the gradient
        f.tail += [
            f"{g} = torch.autograd.grad(({t} * {t}).sum(), {w}, create_graph=True)[0]",
            f"{t} = {g} * 2.0",
        ]
    elif form == 2:
        f.tail += [f"{g} = torch.autograd.grad({t}.sum(), [{w}])[0]", f"{t} = {t}.detach()"]
        f.returns.append(g)
    f.returns.append(t)
    return f


# ---- global RNG: seeded dropout in train mode ----------------------------------------------------
def rng_draws(rng: random.Random, k: str, avoid: frozenset[str]) -> Family:
    f = Family("rng")
    name = _Names(k)
    t = name("t")
    f.prelude = [
        "RANDOM = True",
        "torch.manual_seed(0)  # both module copies build the same weights",
        "NET = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Dropout(0.5),"
        " torch.nn.Linear(4, 2))",
        "DROP = torch.nn.Dropout(0.5)",
    ]
    for _ in range(rng.randint(1, 3)):
        t = name("t")
        f.head.append(
            f"{t} = "
            + rng.choice(
                [
                    "torch.nn.functional.dropout(x, p=0.5, training=True)",
                    "DROP(x)",
                    "x + torch.rand_like(x)",
                    "torch.bernoulli(torch.full_like(x, 0.5)) * y",
                    "x * torch.randn(1)",
                    # detached: the generic statements may write it in place
                    "NET(torch.stack([x.sum(), y.sum(), x.mean()])).detach().sum() + x",
                ]
            )
        )
        f.tensors[t] = 1
    return f


# ---- profiler state queried in a branch ----------------------------------------------------------
def profiler_state(rng: random.Random, k: str, avoid: frozenset[str]) -> Family:
    f = Family("profiler_state")
    name = _Names(k)
    t = name("t")
    calls = sorted(rng.sample(range(CALLS), rng.randint(1, 2)))
    f.prelude = [f"PROFILE_CALLS = {tuple(calls)!r}"]
    f.head = _if("torch.autograd._profiler_enabled()", f"{t} = x + 1.0", f"{t} = x - 1.0")
    f.tensors[t] = 1
    return f


# ---- fn as a method using zero-argument super() around a graph break -----------------------------
def super_method(rng: random.Random, k: str, avoid: frozenset[str]) -> Family:
    f = Family("super_method", entry_method=True)
    name = _Names(k)
    t = name("t")
    f.prelude = [
        "class Base:",
        "    def f(self, x):",
        "        return x * 2.0",
    ]
    f.head = [f"{t} = super().f(x)", "print('break')", f"{t} = super().f({t}) + 1.0"]
    f.tensors[t] = 1
    return f


# ---- equality: == decided by the operands' classes ---------------------------------------------
def equality(rng: random.Random, k: str, avoid: frozenset[str]) -> Family:
    """``==``/``!=`` between dataclasses passed in, objects of a class whose ``__eq__`` logs,
    dicts made in the frame and lists holding NaN: never an identity answer where the class
    (or the container) compares by value; dict views read after the dict changed (the
    behaviour corpus found dicts and dataclasses answered by identity, and stale views)."""
    f = Family("equality")
    name = _Names(k)
    a, b, t, q = name("a"), name("b"), name("t"), name("q")
    table = f"E_{a.upper()}"
    form = rng.randrange(5)
    f.prelude = [
        "import dataclasses",
        "@dataclasses.dataclass",
        "class EqDC:",
        "    k: int",
        "    v: float",
        "class EqLog:",
        "    def __init__(self, v):",
        "        self.v = v",
        "    def __eq__(self, other):",
        "        LOG.append('eq')",
        "        return isinstance(other, EqLog) and self.v == other.v",
        "    __hash__ = None",
    ]
    if form in (0, 1):
        pairs = ["(1.0, 1.0)", "(1.0, 2.0)", "(2.0, 2.0)", "(-0.0, 0.0)"]
        f.prelude.append(f"{table} = {_per_call(rng, pairs)}")
        cls = "EqDC(1, {})" if form == 0 else "EqLog({})"
        f.params = [a, b]
        f.make = [
            f"{a} = {cls.format(f'{table}[call][0]')}",
            f"{b} = {cls.format(f'{table}[call][1]')}",
        ]
        f.head = [
            *_if(f"{a} == {b}", f"{t} = x + {a}.v", f"{t} = x - {b}.v"),
            f"{q} = [{a} != {b}, {b} == {a}, {a} == {a}]",
        ]
    elif form == 2:
        f.prelude.append(f"{table} = {_per_call(rng, ['1.0', '2.0', '-0.0'])}")
        f.params, f.make = [a], [f"{a} = {{'k': {table}[call], 'w': 2.0}}"]
        f.head = [
            f"{b} = {{'w': 2.0, 'k': 1.0}}",
            *_if(f"{a} == {b}", f"{t} = x * 2.0", f"{t} = x + 1.0"),
            f"{q} = [{a} != {b}, {b} == dict({b}), {a} == {{}}]",
        ]
    elif form == 4:
        # a view taken before the dict changes sees the change (a snapshot once did not)
        f.prelude.append(f"{table} = {_per_call(rng, ['1.0', '2.0'])}")
        f.params, f.make = [a], [f"{a} = {{'k': {table}[call]}}"]
        view = rng.choice(["keys", "values", "items"])
        f.head = [
            f"{b} = {a}.{view}()",
            f"{a}['w'] = 2.0",
            f"{t} = x * len({b})",
            f"{q} = [list({b}), 'w' in {a}.keys(), {a}.keys() == {{'k', 'w'}}]",
        ]
    else:
        values = _per_call(rng, ["1.0", "float('nan')", "-0.0"])
        f.prelude.append(f"{table} = {values}")
        f.params, f.make = [a], [f"{a} = [{table}[call], 1.0]"]
        f.head = [
            f"{b} = [{a}[0], 1.0]",
            *_if(f"{a} == {b}", f"{t} = x * 3.0", f"{t} = x - 2.0"),
            f"{q} = [{a} == list({a}), float('nan') in {a}, {a} != [1.0, 1.0]]",
        ]
    f.tensors[t] = 1
    f.returns.append(q)
    return f


# Constructs of a family that a campaign can leave out (``--avoid``), each a known bug's class.
CONSTRUCTS = {
    "nan_scalar": "NaN among the scalar arguments (issue 18 item 1)",
    "scalar_kind_query": "isinstance/copysign/print/arithmetic on bool-int-float scalars",
    "identity_inplace": "`is` tests after in-place ops (item 8)",
    "detach_alias": "a returned detach() of an input (item 11)",
    "as_strided_write": "writes through as_strided windows of an input (item 12)",
    "set_resize": "set_/resize_ on an input (item 16)",
    "container_subclass": "list/dict/tuple subclasses as arguments (item 4)",
    "module_truthiness": "truthiness of an empty/non-empty module container (item 10)",
    "torch_function_log": "a __torch_function__ subclass whose override has side effects",
    "getattr_probe": "a user class with __getattr__ that has side effects",
    "hasattr_probe": "hasattr() answered by such a __getattr__ (regressions/test_hasattr_...)",
    "class_descriptor": "a descriptor read on the class (Obj.d) whose __get__ has side effects",
    "instance_descriptor": "o.d = v; o.d through a data descriptor whose __get__ has side effects",
    "channels_last_query": "is_contiguous(memory_format=channels_last) (item 6)",
    "storage_offset": "storage_offset() of an input (item 5)",
    "size_stride_kw": "size(dim=)/stride(dim=) (item 9)",
    "float_tensor_isinstance": "isinstance(t, torch.FloatTensor) (item 10)",
    "grad_mode_stmt": "torch.set_grad_enabled(...) as a statement (item 15)",
    "no_grad_calls": "some calls of a grad_mode program made under no_grad (item 15)",
    "backward_in_fn": "backward()/autograd.grad inside the compiled function",
    "check_after_side_effect": "fixed (symbolic_vm.runtime_checks, session 11): it no longer "
    "changes programs; kept so recorded commands still run (regressions/test_check_failure_...)",
    "check_caught": "fixed (symbolic_vm.runtime_checks, session 11): it no longer changes "
    "programs; kept so recorded commands still run (regressions/test_check_failure_...)",
    "exception_kept_alive": "fixed (symbolic_vm breaks.region and guard_plan, session 11): kept "
    "so recorded commands still run (regressions/test_except_as_..., "
    "test_exception_argument_not_kept_alive_by_guards.py)",
    "builtin_type_error": "fixed (symbolic_vm.eager_errors, session 11): it no longer changes "
    "programs; kept so recorded commands still run (regressions/test_builtin_type_errors_...)",
}

FAMILIES: dict[str, Callable[[random.Random, str, frozenset[str]], Family]] = {
    "special_scalars": special_scalars,
    "aliasing": aliasing,
    "containers": containers,
    "tensor_subclass": tensor_subclass,
    "side_effect_attrs": side_effect_attrs,
    "partials": partials,
    "layouts": layouts,
    "grad_mode": grad_mode,
    "data_writes": data_writes,
    "backward": backward,
    "rng": rng_draws,
    "profiler_state": profiler_state,
    "super_method": super_method,
    "equality": equality,
}
