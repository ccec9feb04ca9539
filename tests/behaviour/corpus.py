"""A corpus of small programs in the style users write, one behaviour each, run by
``test_behaviour.py`` eagerly, under Strata and under torch.compile.

Each case is a function and a maker of fresh inputs. The programs are our own; the kinds of
behaviour follow what torch.compile's own test suites exercise (Python semantics inside a
traced frame, containers, classes, exceptions, the standard library, tensor methods, modules),
so the pass rate says how much of torch.compile's supported behaviour Strata matches.
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import enum
import functools
import itertools
import math
import operator
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    fn: Callable[..., Any]
    inputs: Callable[[], tuple[Any, ...]]


CASES: list[Case] = []


def _x(*shape: int) -> Callable[[], tuple[Any, ...]]:
    return lambda: (torch.randn(*shape),)


def case(
    inputs: Callable[[], tuple[Any, ...]] = _x(4, 4), name: str | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        CASES.append(Case(name or fn.__name__, fn, inputs))
        return fn

    return register


# --------------------------------------------------------------------------- plain Python


@case()
def closure_reads_enclosing_values(x: torch.Tensor) -> Any:
    scale = 3.0

    def inner(t: torch.Tensor) -> torch.Tensor:
        return t * scale

    return inner(x) + 1


@case()
def nonlocal_counter(x: torch.Tensor) -> Any:
    count = 0

    def bump() -> None:
        nonlocal count
        count += 2

    bump()
    bump()
    return x * count


@case()
def lambda_in_map(x: torch.Tensor) -> Any:
    return list(map(lambda t: t * 2, [x, x + 1]))


@case()
def list_comprehension_over_range(x: torch.Tensor) -> Any:
    return sum(x * i for i in range(4)), [x[i] for i in range(2)]


@case()
def dict_and_set_comprehensions(x: torch.Tensor) -> Any:
    d = {f"k{i}": x * i for i in range(3)}
    s = {i % 2 for i in range(5)}
    return d, len(s)


@case()
def star_args_and_kwargs(x: torch.Tensor) -> Any:
    def g(*args: Any, **kwargs: Any) -> Any:
        return sum(args) + kwargs.get("b", 0) * len(kwargs)

    return g(x, x, 1, b=2, c=3)


@case()
def keyword_only_and_defaults(x: torch.Tensor) -> Any:
    def g(a: torch.Tensor, b: float = 2.0, *, c: float = 3.0) -> torch.Tensor:
        return a * b + c

    return g(x), g(x, 4.0), g(x, c=1.0)


@case()
def unpacking_and_star_assignment(x: torch.Tensor) -> Any:
    a, *rest, z = [x, x + 1, x + 2, x + 3]
    (b, c), d = (x * 2, x * 3), 4
    return a + z + b + c + d, len(rest)


@case()
def slicing_lists_and_tuples(x: torch.Tensor) -> Any:
    items = [x * i for i in range(6)]
    return items[1:4], items[::-2], tuple(items)[-1], items[slice(2, None)]


@case()
def string_methods_on_constants(x: torch.Tensor) -> Any:
    name = "layer_0.weight"
    parts = name.split(".")
    return x * len(parts[0]), name.startswith("layer"), "-".join(parts).upper(), name.replace(
        "_", ""
    )


@case()
def fstrings_and_format(x: torch.Tensor) -> Any:
    label = f"{x.shape[0]}x{x.shape[1]}:{3.14159:.2f}"
    return x * len(label), label, "{}-{:03d}".format("a", 7)


@case()
def builtins_on_lists(x: torch.Tensor) -> Any:
    vals = [3, 1, 2]
    return (
        x * max(vals) + min(vals),
        sorted(vals),
        list(reversed(vals)),
        any(v > 2 for v in vals),
        all(v > 0 for v in vals),
        sum(vals),
        len(vals),
    )


@case()
def enumerate_zip_and_filter(x: torch.Tensor) -> Any:
    ts = [x, x * 2, x * 3]
    out = [t * i for i, t in enumerate(ts)]
    pairs = [a + b for a, b in zip(ts, out)]
    return pairs, list(filter(lambda v: v % 2, range(7)))


@case()
def list_methods(x: torch.Tensor) -> Any:
    items = [x]
    items.append(x + 1)
    items.extend([x + 2, x + 3])
    items.insert(0, x - 1)
    last = items.pop()
    del items[1]
    items.reverse()
    return items, last, len(items)


@case()
def dict_methods(x: torch.Tensor) -> Any:
    d = {"a": x}
    d.update(b=x + 1)
    d.setdefault("c", x + 2)
    popped = d.pop("a")
    keys = list(d.keys())
    return d, popped, keys, list(d.items())[0][0], d.get("zzz", 5)


@case()
def set_operations(x: torch.Tensor) -> Any:
    a, b = {1, 2, 3}, {2, 3, 4}
    return x * len(a | b), sorted(a & b), sorted(a - b), 3 in a


@case()
def tuple_and_list_equality(x: torch.Tensor) -> Any:
    s = tuple(x.shape)
    return x + (1 if s == (4, 4) else 2), list(s) == [4, 4], s[::-1]


@case()
def chained_comparisons(x: torch.Tensor) -> Any:
    n = x.shape[0]
    return x * (2 if 0 < n <= 4 < 10 else 3)


@case()
def ternary_and_boolean_ops(x: torch.Tensor) -> Any:
    flag = None
    value = flag or 5
    other = flag and 7
    return x * value, other, not flag


@case()
def while_loop_on_python_ints(x: torch.Tensor) -> Any:
    i, acc = 0, x
    while i < 3:
        acc = acc * 2
        i += 1
    return acc


@case()
def for_else_and_break(x: torch.Tensor) -> Any:
    for i in range(5):
        if i == 3:
            break
    else:
        i = -1
    return x * i


@case()
def recursion_bounded(x: torch.Tensor) -> Any:
    def fact(n: int) -> int:
        return 1 if n <= 1 else n * fact(n - 1)

    return x * fact(4)


@case()
def global_constant_read(x: torch.Tensor) -> Any:
    return x * _SCALE + _OFFSETS[1]


_SCALE = 1.5
_OFFSETS = (0.5, 0.25)


@case()
def integer_arithmetic_and_divmod(x: torch.Tensor) -> Any:
    n = x.shape[0]
    q, r = divmod(17, n)
    return x * q + r, n // 3, n % 3, -n // 3, 2**n, abs(-n), round(2.5), round(3.14159, 2)


@case()
def float_special_values(x: torch.Tensor) -> Any:
    return x * math.inf if False else x.clamp(-math.inf, math.inf), math.isnan(float("nan"))


@case()
def math_module(x: torch.Tensor) -> Any:
    return x * math.sqrt(16) + math.floor(2.7) + math.log(math.e) + math.pi, math.gcd(12, 18)


@case()
def isinstance_checks(x: torch.Tensor) -> Any:
    checks = (
        isinstance(x, torch.Tensor),
        isinstance(3, int),
        isinstance(3.0, (int, float)),
        isinstance([x], list),
        isinstance(x, nn.Parameter),
        type(x) is torch.Tensor,
        callable(len),
    )
    return x * sum(checks), checks


@case()
def getattr_setattr_hasattr_on_namespace(x: torch.Tensor) -> Any:
    ns = _Namespace()
    setattr(ns, "scale", 4.0)
    return x * getattr(ns, "scale") + getattr(ns, "missing", 1.0), hasattr(ns, "scale")


class _Namespace:
    pass


@case()
def id_and_is(x: torch.Tensor) -> Any:
    y = x
    z = x + 0
    return y is x, z is x, x is not None


@case()
def walrus_operator(x: torch.Tensor) -> Any:
    if (n := x.shape[0]) > 2:
        return x * n
    return x


@case()
def match_statement(x: torch.Tensor) -> Any:
    match x.dim():
        case 1:
            return x + 1
        case 2:
            return x + 2
        case _:
            return x


@case()
def assert_that_holds(x: torch.Tensor) -> Any:
    assert x.dim() == 2, "needs a matrix"
    return x.t()


# --------------------------------------------------------------------------- classes


class _Point(NamedTuple):
    a: torch.Tensor
    b: int


@dataclasses.dataclass
class _Pair:
    left: torch.Tensor
    right: torch.Tensor
    weight: float = 2.0

    def total(self) -> torch.Tensor:
        return self.left * self.weight + self.right


@dataclasses.dataclass(frozen=True)
class _Frozen:
    k: int
    v: float


class _Color(enum.Enum):
    RED = 1
    BLUE = 2


class _Base:
    factor = 2.0

    def __init__(self, offset: float) -> None:
        self.offset = offset

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        return t * self.factor + self.offset

    @classmethod
    def make(cls, offset: float) -> _Base:
        return cls(offset)

    @staticmethod
    def helper(t: torch.Tensor) -> torch.Tensor:
        return t - 1

    @property
    def doubled(self) -> float:
        return self.offset * 2


class _Derived(_Base):
    factor = 3.0

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        return super().apply(t) + 1


class _Vec:
    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    def __add__(self, other: Any) -> _Vec:
        return _Vec(self.t + (other.t if isinstance(other, _Vec) else other))

    def __radd__(self, other: Any) -> _Vec:
        return _Vec(self.t + other)

    def __mul__(self, k: float) -> _Vec:
        return _Vec(self.t * k)

    def __len__(self) -> int:
        return self.t.shape[0]

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.t[i]

    def __iter__(self) -> Any:
        return iter([self.t[0], self.t[1]])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Vec) and other.t is self.t

    def __contains__(self, item: object) -> bool:
        return item == "t"

    def __bool__(self) -> bool:
        return True

    __hash__ = None  # type: ignore[assignment]


class _Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a: float, b: float) -> None:
        self.a, self.b = a, b


@case()
def namedtuple_fields_and_methods(x: torch.Tensor) -> Any:
    p = _Point(x, 3)
    q = p._replace(b=4)
    return p.a * q.b, p._asdict()["b"], _Point._fields, tuple(p)[1]


@case()
def dataclass_made_in_the_frame(x: torch.Tensor) -> Any:
    pair = _Pair(x, x + 1)
    pair.weight = 3.0
    return pair.total(), dataclasses.replace(pair, weight=1.0).total(), dataclasses.fields(pair)[
        0
    ].name


@case()
def frozen_dataclass_and_equality(x: torch.Tensor) -> Any:
    a, b = _Frozen(1, 2.0), _Frozen(1, 2.0)
    return x * (a == b) + a.v, hash(a) == hash(b)


@case(inputs=lambda: (torch.randn(4, 4), _Frozen(1, 2.0), _Frozen(1, 2.0)))
def dataclass_inputs_compared(x: torch.Tensor, a: _Frozen, b: _Frozen) -> Any:
    return x + (1 if a == b else 2), a != b, a is b


@case()
def dict_and_set_equality(x: torch.Tensor) -> Any:
    d1, d2 = {"a": 1, "b": 2}, {"b": 2, "a": 1}
    return x * (d1 == d2), d1 != {"a": 1}, {1, 2} == {2, 1}, [1, 2] == [1, 2], (1,) != (2,)


@case()
def enum_members(x: torch.Tensor) -> Any:
    c = _Color.BLUE
    return x * c.value, c.name, c is _Color.BLUE, _Color(1).name


@case()
def class_methods_static_methods_properties(x: torch.Tensor) -> Any:
    obj = _Base.make(0.5)
    return obj.apply(x), _Base.helper(x), obj.doubled


@case()
def inheritance_and_super(x: torch.Tensor) -> Any:
    d = _Derived(1.0)
    return d.apply(x), isinstance(d, _Base), type(d).__name__, _Derived.__mro__[1].__name__


@case()
def user_dunder_methods(x: torch.Tensor) -> Any:
    v = _Vec(x)
    w = v + v
    u = 1 + w * 2
    a, b = v
    return u.t, len(v), v[1], a + b, v == v, "t" in v, bool(v)


@case()
def slots_class(x: torch.Tensor) -> Any:
    s = _Slotted(2.0, 3.0)
    s.a = 4.0
    return x * s.a + s.b


@case()
def object_attributes_mutated_in_the_frame(x: torch.Tensor) -> Any:
    ns = _Namespace()
    ns.values = []
    for i in range(3):
        ns.values.append(x * i)
    ns.count = len(ns.values)
    return ns.values, ns.count, vars(ns)["count"]


# --------------------------------------------------------------------------- exceptions


class _MyError(ValueError):
    def __init__(self, msg: str, code: int) -> None:
        super().__init__(msg)
        self.code = code


@case()
def try_except_caught_in_the_frame(x: torch.Tensor) -> Any:
    try:
        {}["missing"]
    except KeyError as e:
        return x + 1, e.args
    return x


@case()
def try_finally_runs(x: torch.Tensor) -> Any:
    out = []
    try:
        out.append(x * 2)
    finally:
        out.append(x * 3)
    return out


@case()
def user_exception_raised_and_caught(x: torch.Tensor) -> Any:
    try:
        raise _MyError("bad", 7)
    except ValueError as e:
        return x * e.code, str(e), type(e).__name__


@case()
def exception_from_builtin_on_traced_values(x: torch.Tensor) -> Any:
    items = [x]
    try:
        items[5]
    except IndexError:
        items.append(x + 1)
    try:
        int("nope")
    except ValueError:
        items.append(x + 2)
    return items


@case()
def raise_from_inside_nested_call(x: torch.Tensor) -> Any:
    def check(n: int) -> None:
        if n > 2:
            raise RuntimeError("too big")

    try:
        check(x.shape[0])
    except RuntimeError as e:
        return x - 1, str(e)
    return x


@case()
def stop_iteration_from_next_default(x: torch.Tensor) -> Any:
    it = iter([x])
    first = next(it)
    second = next(it, None)
    return first * 2, second is None


# --------------------------------------------------------------------------- stdlib


@case()
def functools_partial_and_reduce(x: torch.Tensor) -> Any:
    add = functools.partial(torch.add, alpha=2)
    return add(x, x), functools.reduce(operator.mul, [1, 2, 3, 4])


@case()
def functools_lru_cache_function(x: torch.Tensor) -> Any:
    return x * _cached_scale(3)


@functools.lru_cache(maxsize=8)
def _cached_scale(n: int) -> float:
    return n * 1.5


@case()
def itertools_functions(x: torch.Tensor) -> Any:
    chained = list(itertools.chain([1, 2], [3]))
    prods = list(itertools.product([1, 2], repeat=2))
    acc = list(itertools.accumulate([1, 2, 3]))
    pairs = list(itertools.combinations(range(3), 2))
    return x * sum(chained), len(prods), acc, pairs, list(itertools.islice(itertools.count(), 3))


@case()
def operator_module(x: torch.Tensor) -> Any:
    get = operator.itemgetter(1)
    attr = operator.attrgetter("shape")
    return operator.add(x, 1), get([x, x * 2]), attr(x)[0], operator.neg(x)


@case()
def collections_types(x: torch.Tensor) -> Any:
    od = collections.OrderedDict(a=x, b=x + 1)
    od.move_to_end("a")
    dd: collections.defaultdict[str, list[torch.Tensor]] = collections.defaultdict(list)
    dd["k"].append(x)
    cnt = collections.Counter("abca")
    dq = collections.deque([1, 2, 3], maxlen=3)
    dq.append(4)
    return list(od.keys()), dd["k"][0] * 2, cnt["a"], list(dq)


@case()
def copy_of_containers(x: torch.Tensor) -> Any:
    import copy

    base = {"a": [x, 1]}
    shallow = copy.copy(base)
    shallow["b"] = 2
    deep = copy.deepcopy({"n": [1, 2]})
    deep["n"].append(3)
    return len(base), shallow["a"][0] * 2, deep


@case()
def sorted_with_key_and_min_max_default(x: torch.Tensor) -> Any:
    words = ["ccc", "a", "bb"]
    return (
        sorted(words, key=len),
        max(words, key=len),
        min([], default=5),
        x * len(sorted(words, reverse=True)[0]),
    )


@case()
def contextlib_nullcontext_and_suppress(x: torch.Tensor) -> Any:
    import contextlib

    with contextlib.nullcontext():
        y = x * 2
    with contextlib.suppress(KeyError):
        {}["k"]
        y = y * 100
    return y


# --------------------------------------------------------------------------- tensors


@case()
def tensor_attributes(x: torch.Tensor) -> Any:
    return x * x.dim() + x.numel(), x.shape, x.dtype, x.device, x.requires_grad, x.ndim, x.is_cuda


@case()
def shape_arithmetic(x: torch.Tensor) -> Any:
    b, n = x.shape
    return x.reshape(b * n).view(n, b), x.size(-1), x.new_zeros(b, 2), x.flatten(1).shape


@case()
def indexing_forms(x: torch.Tensor) -> Any:
    idx = torch.tensor([0, 2])
    return x[0], x[:, 1], x[..., -1], x[None, 1:3], x[idx], x[x > 0].numel() >= 0, x[1, 2]


@case()
def setitem_forms(x: torch.Tensor) -> Any:
    y = x.clone()
    y[0] = 1.0
    y[:, 1] = y[:, 2]
    y[y > 1] = 0.0
    return y


@case()
def tensor_methods_and_functions(x: torch.Tensor) -> Any:
    return (
        x.sum(dim=0, keepdim=True),
        x.mean(-1),
        x.max(dim=1).values,
        x.argmax(),
        torch.cat([x, x], dim=0),
        torch.stack([x, x]).shape,
        x.chunk(2)[1],
        x.softmax(-1),
        x.transpose(0, 1).contiguous(),
        x.cumsum(0),
        torch.where(x > 0, x, -x),
    )


@case()
def dtype_promotion_and_conversion(x: torch.Tensor) -> Any:
    i = torch.arange(4)
    return x[0] + i, (x > 0).float().sum(), x.to(torch.float64).dtype, x.int().dtype, i / 2


@case()
def python_scalars_with_tensors(x: torch.Tensor) -> Any:
    return 2 * x + 1.5, x / 3, 1 - x, x**2, -x, abs(x)


@case()
def tensor_constructors(x: torch.Tensor) -> Any:
    return (
        x + torch.ones(4, 4),
        torch.zeros_like(x),
        torch.full((2,), 3.0),
        torch.eye(4) @ x,
        torch.arange(0, 8, 2),
        torch.linspace(0, 1, 5),
        torch.tensor([1.0, 2.0]) * 3,
    )


@case()
def inplace_methods_on_intermediates(x: torch.Tensor) -> Any:
    y = x * 1
    y.add_(1).mul_(2)
    y.clamp_(min=0)
    return y


@case()
def inplace_on_input(x: torch.Tensor) -> Any:
    x.add_(1)
    return x * 2


@case()
def views_and_aliasing(x: torch.Tensor) -> Any:
    v = x.view(16)
    t = x.t()
    return v[3], t.is_contiguous(), t.contiguous().is_contiguous(), x.unsqueeze(0).squeeze(0).shape


@case()
def matmul_and_linear_algebra(x: torch.Tensor) -> Any:
    return x @ x.t(), torch.mm(x, x), torch.bmm(x[None], x[None]), torch.einsum("ij,jk->ik", x, x)


@case()
def functional_ops(x: torch.Tensor) -> Any:
    return (
        F.relu(x),
        F.gelu(x),
        F.silu(x),
        F.softmax(x, -1),
        F.layer_norm(x, (4,)),
        F.normalize(x, dim=-1),
        F.pad(x, (1, 1)),
        F.dropout(x, 0.5, training=False),
    )


@case()
def torch_no_grad_and_enable_grad(x: torch.Tensor) -> Any:
    with torch.no_grad():
        a = x * 2
        with torch.enable_grad():
            b = x * 3
    return a, b, torch.is_grad_enabled()


@case(inputs=lambda: (torch.randn(4, 4, requires_grad=True),))
def requires_grad_input_and_detach(x: torch.Tensor) -> Any:
    y = x * 2
    return y.detach() + 1, y.requires_grad


@case()
def tolist_and_item_in_python(x: torch.Tensor) -> Any:
    n = x.shape[0]
    return x * n, int(torch.tensor(3).item()) if n > 0 else 0


@case()
def torch_functions_on_shapes(x: torch.Tensor) -> Any:
    return torch.Size([2, 3]).numel(), x.expand(2, 4, 4).shape, list(x.shape) + [1], x.size()


@case()
def dtype_and_device_objects(x: torch.Tensor) -> Any:
    dt = x.dtype
    return x.to(dt), dt.is_floating_point, torch.finfo(dt).eps, x.new_ones(2).dtype is dt


@case(inputs=lambda: (torch.randn(4, 4), [torch.randn(4), torch.randn(4)]))
def list_of_tensors_input(x: torch.Tensor, ts: list[torch.Tensor]) -> Any:
    return x + sum(ts), len(ts)


@case(inputs=lambda: (torch.randn(4, 4), {"a": torch.randn(4), "scale": 2.0}))
def dict_input(x: torch.Tensor, d: dict[str, Any]) -> Any:
    return x * d["scale"] + d["a"], sorted(d)


@case(inputs=lambda: (torch.randn(4, 4), 3, 2.5, True, "mode"))
def scalar_inputs(x: torch.Tensor, n: int, f: float, b: bool, s: str) -> Any:
    y = x * n + f
    if b and s == "mode":
        y = y - 1
    return y


@case(inputs=lambda: (torch.randn(4, 4), None))
def none_input(x: torch.Tensor, mask: Any) -> Any:
    return x if mask is None else x * mask


# --------------------------------------------------------------------------- modules


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])
        self.table = nn.ModuleDict({"a": nn.ReLU(), "b": nn.Tanh()})
        self.register_buffer("shift", torch.ones(4))
        self.scale = nn.Parameter(torch.full((4,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.lin(x))
        for i, layer in enumerate(self.layers):
            h = self.table["a" if i % 2 == 0 else "b"](layer(h))
        return h * self.scale + self.shift


_BLOCK = _Block()


@case()
def module_with_containers_buffers_and_parameters(x: torch.Tensor) -> Any:
    return _BLOCK(x)


@case()
def module_introspection(x: torch.Tensor) -> Any:
    n_params = sum(p.numel() for p in _BLOCK.parameters())
    names = [n for n, _ in _BLOCK.named_children()]
    return x * n_params, names, _BLOCK.training, len(list(_BLOCK.modules()))


@case()
def sequential_indexing_and_len(x: torch.Tensor) -> Any:
    seq = _SEQ
    return seq[0](x), seq[-1](x), len(seq), seq[1:](x)


_SEQ = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))


@case()
def functional_call_of_a_module_builder(x: torch.Tensor) -> Any:
    return torch.func.functional_call(_SEQ, dict(_SEQ.named_parameters()), (x,))


@case()
def module_forward_hooks_run(x: torch.Tensor) -> Any:
    return _HOOKED(x)


_HOOKED = nn.Linear(4, 4)
_HOOKED.register_forward_hook(lambda m, inp, out: out * 2)


@case()
def convolution_pooling_and_batchnorm_eval(x: torch.Tensor) -> Any:
    img = x.reshape(1, 1, 4, 4)
    return _CONV(img)


_CONV = nn.Sequential(
    nn.Conv2d(1, 2, 3, padding=1), nn.BatchNorm2d(2), nn.ReLU(), nn.AdaptiveAvgPool2d(1)
).eval()


@case()
def attention_through_sdpa(x: torch.Tensor) -> Any:
    q = x.reshape(1, 1, 4, 4)
    return F.scaled_dot_product_attention(q, q, q, is_causal=True)


@case()
def embedding_and_cross_entropy(x: torch.Tensor) -> Any:
    tokens = torch.tensor([[1, 2, 3]])
    emb = _EMB(tokens)
    logits = emb @ _EMB.weight.t()
    return F.cross_entropy(logits.view(-1, 10), tokens.view(-1))


_EMB = nn.Embedding(10, 4)


# --------------------------------------------------------------------------- more Python


class _Recorder:
    """A user context manager and callable object."""

    def __init__(self) -> None:
        self.log: list[str] = []

    def __enter__(self) -> _Recorder:
        self.log.append("enter")
        return self

    def __exit__(self, *exc: object) -> bool:
        self.log.append("exit")
        return False

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        self.log.append("call")
        return t * 2


class _Lazy:
    def __init__(self) -> None:
        self._scale = 1.0

    @property
    def scale(self) -> float:
        return self._scale

    @scale.setter
    def scale(self, value: float) -> None:
        self._scale = value * 2

    def __getattr__(self, name: str) -> float:
        return float(len(name))


def _twice(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs) * 2

    return wrapper


@_twice
def _doubled(t: torch.Tensor) -> torch.Tensor:
    return t + 1


@case()
def user_context_manager_made_in_the_frame(x: torch.Tensor) -> Any:
    rec = _Recorder()
    with rec as r:
        y = r(x)
    return y, rec.log


@case()
def callable_object(x: torch.Tensor) -> Any:
    rec = _Recorder()
    return rec(rec(x)), len(rec.log)


@case()
def property_setter_and_getattr_fallback(x: torch.Tensor) -> Any:
    obj = _Lazy()
    obj.scale = 3.0
    return x * obj.scale + obj.anything


@case()
def decorated_function_with_wraps(x: torch.Tensor) -> Any:
    return _doubled(x), _doubled.__name__


@case()
def generator_function_consumed(x: torch.Tensor) -> Any:
    def pieces(t: torch.Tensor) -> Any:
        for i in range(3):
            yield t * i

    return list(pieces(x)), sum(pieces(x))


@case()
def generator_expression_into_tuple(x: torch.Tensor) -> Any:
    return tuple(t.sum() for t in x.unbind(0))


@case()
def kwargs_unpacking_into_a_call(x: torch.Tensor) -> Any:
    def g(a: torch.Tensor, *, scale: float, shift: float) -> torch.Tensor:
        return a * scale + shift

    opts = {"scale": 2.0, "shift": 1.0}
    args = (x,)
    return g(*args, **opts), g(x, **{**opts, "shift": 5.0})


@case()
def args_forwarding(x: torch.Tensor) -> Any:
    def inner(*args: Any, **kwargs: Any) -> Any:
        return torch.cat(args, **kwargs)

    def outer(*args: Any, **kwargs: Any) -> Any:
        return inner(*args, **kwargs)

    return outer(x, x, dim=1)


@case()
def percent_formatting_and_str_conversions(x: torch.Tensor) -> Any:
    s = "%s-%d-%.1f" % ("a", 3, 2.5)  # noqa: UP031 (the behaviour under test)
    return x * len(s), s, str(12), repr("q"), int("7") + float("1.5")


@case()
def try_except_else(x: torch.Tensor) -> Any:
    try:
        y = x * 2
    except RuntimeError:
        y = x
    else:
        y = y + 1
    return y


@case()
def del_statements(x: torch.Tensor) -> Any:
    d = {"a": 1, "b": 2}
    del d["a"]
    items = [1, 2, 3]
    del items[0]
    y = x * 2
    del x
    return y, d, items


@case()
def class_attribute_read_through_instance_and_class(x: torch.Tensor) -> Any:
    return x * _Base.factor + _Derived(0.0).factor


@case()
def closures_returned_and_called(x: torch.Tensor) -> Any:
    def make(k: float) -> Callable[[torch.Tensor], torch.Tensor]:
        return lambda t: t * k

    fns = [make(i) for i in (1.0, 2.0)]
    return [f(x) for f in fns]


@case()
def default_argument_values(x: torch.Tensor) -> Any:
    def g(t: torch.Tensor, scales: tuple[float, ...] = (1.0, 2.0)) -> torch.Tensor:
        return t * sum(scales)

    return g(x), g(x, (3.0,))


@case()
def dict_from_zip_and_enumerate_start(x: torch.Tensor) -> Any:
    names = ["a", "b"]
    d = dict(zip(names, [x, x * 2]))
    return d, list(enumerate(names, start=1)), list(zip(names, range(2), strict=True))


@case()
def list_sort_with_key_and_reverse(x: torch.Tensor) -> Any:
    vals = [(2, "b"), (1, "a"), (3, "c")]
    vals.sort(key=lambda p: p[0], reverse=True)
    return x * vals[0][0], vals


@case()
def range_objects(x: torch.Tensor) -> Any:
    r = range(1, 10, 3)
    return x * len(r), list(reversed(r)), r[1], 4 in r, r.index(7)


@case()
def abc_isinstance_checks(x: torch.Tensor) -> Any:
    import collections.abc as cabc

    return (
        x * isinstance({}, cabc.Mapping),
        isinstance([], cabc.Sequence),
        isinstance((x,), cabc.Iterable),
        isinstance(x, cabc.Sized),
    )


@case()
def torch_predicates(x: torch.Tensor) -> Any:
    return (
        x * torch.is_tensor(x),
        torch.is_floating_point(x),
        torch.jit.is_scripting(),
        torch.is_grad_enabled(),
        torch.numel(x),
    )


@case()
def tensor_iteration_and_unbind(x: torch.Tensor) -> Any:
    rows = [r * i for i, r in enumerate(x)]
    a, b, *_ = x
    return rows, a + b


@case()
def tensor_in_python_containers_and_len(x: torch.Tensor) -> Any:
    stack = {"h": [x]}
    stack["h"].append(x + 1)
    return len(x), len(stack["h"]), torch.stack(stack["h"]).sum(0)


@case()
def nested_functions_with_shared_cell(x: torch.Tensor) -> Any:
    total = x * 0

    def add(t: torch.Tensor) -> None:
        nonlocal total
        total = total + t

    for i in range(3):
        add(x * i)
    return total


@case()
def early_return_in_loop(x: torch.Tensor) -> Any:
    for i in range(10):
        if i * x.shape[0] > 8:
            return x * i
    return x


@case()
def nested_loops_with_continue(x: torch.Tensor) -> Any:
    acc = x
    for i in range(3):
        for j in range(3):
            if (i + j) % 2:
                continue
            acc = acc + i * j
    return acc


@case()
def bool_int_float_conversions(x: torch.Tensor) -> Any:
    return x * int(2.7) + float(True) + bool(0), int(-2.5), float("inf") > 1e308


@case()
def tensor_reductions_to_python_via_shape(x: torch.Tensor) -> Any:
    n = x.shape[-1]
    return x.sum(-1) / n, x.new_full((n,), float(n)), x.mean(dim=tuple(range(x.dim())))


@case()
def tensor_method_chains_and_clone(x: torch.Tensor) -> Any:
    y = x.clone().detach().requires_grad_(False)
    return y.abs().sqrt().log1p().exp().clamp(max=4).round(), y.neg_().sign()


@case()
def comparisons_and_logical_tensor_ops(x: torch.Tensor) -> Any:
    m = (x > 0) & (x < 1) | (x == 0)
    return m, ~m, torch.logical_xor(m, x > 0.5), m.any(), m.all(), x.eq(x).all()


@case()
def integer_tensor_ops(x: torch.Tensor) -> Any:
    i = torch.arange(12).reshape(3, 4)
    return i // 3, i % 5, i << 1, i & 6, torch.div(i, 4, rounding_mode="floor"), i.float() @ x


@case()
def gather_scatter_and_index_ops(x: torch.Tensor) -> Any:
    idx = torch.tensor([[0, 1], [2, 3], [1, 0], [3, 2]])
    return (
        x.gather(1, idx),
        torch.zeros(4, 4).scatter(1, idx, 1.0),
        x.index_select(0, torch.tensor([3, 0])),
        x.masked_fill(x > 0, 0.0),
        x.topk(2, dim=1).indices,
        torch.sort(x, dim=0).values,
    )


@case()
def random_ops_seeded_inside(x: torch.Tensor) -> Any:
    torch.manual_seed(3)
    return x + torch.randn(4, 4), torch.rand(2), torch.randint(0, 5, (3,))


@case()
def complex_and_double_tensors(x: torch.Tensor) -> Any:
    z = torch.complex(x, x * 2)
    return z.abs(), z.real + z.imag, x.double().sum(), torch.view_as_real(z).shape


@case(inputs=lambda: (torch.randn(4, 4), _Point(torch.randn(4), 2)))
def namedtuple_input(x: torch.Tensor, p: _Point) -> Any:
    return x * p.b + p.a, p._fields


@case(inputs=lambda: (torch.randn(4, 4), _Pair(torch.randn(4), torch.randn(4))))
def dataclass_input_read_and_method(x: torch.Tensor, pair: _Pair) -> Any:
    return x + pair.total(), pair.weight


@case(inputs=lambda: (torch.randn(4, 4), _Color.RED))
def enum_input(x: torch.Tensor, c: _Color) -> Any:
    return x * c.value if c is _Color.RED else x


@case(inputs=lambda: (torch.randn(4, 4), (2, (3.0, "s"))))
def nested_tuple_input(x: torch.Tensor, spec: tuple[int, tuple[float, str]]) -> Any:
    n, (f, s) = spec
    return x * n + f, s * n


# --------------------------------------------------------------------------- more modules


class _Gated(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 8)
        self.act = nn.GELU()
        self.drop = nn.Dropout(0.0)

    def forward(self, x: torch.Tensor, gate: bool = True) -> torch.Tensor:
        a, b = self.proj(x).chunk(2, dim=-1)
        out = self.act(a) * torch.sigmoid(b) if gate else a
        return self.drop(out)


_GATED = _Gated()


@case()
def module_with_keyword_argument_and_chunk(x: torch.Tensor) -> Any:
    return _GATED(x), _GATED(x, gate=False)


@case()
def module_attribute_reads(x: torch.Tensor) -> Any:
    lin = _GATED.proj
    return x @ lin.weight.t()[:, :4] + lin.bias[:4], lin.in_features, lin.weight.shape


@case()
def module_apply_functional_with_parameters(x: torch.Tensor) -> Any:
    w, b = _GATED.proj.weight, _GATED.proj.bias
    return F.linear(x, w, b), w.requires_grad


@case()
def rnn_cell_and_lstm(x: torch.Tensor) -> Any:
    h = _CELL(x)
    out, _ = _LSTM(x[None])
    return h, out


_CELL = nn.GRUCell(4, 4)
_LSTM = nn.LSTM(4, 4, batch_first=True)


@case()
def multihead_attention_module(x: torch.Tensor) -> Any:
    out, weights = _MHA(x[None], x[None], x[None])
    return out, weights


_MHA = nn.MultiheadAttention(4, 2, batch_first=True)


@case()
def transformer_encoder_layer(x: torch.Tensor) -> Any:
    return _ENC(x[None])


_ENC = nn.TransformerEncoderLayer(4, 2, dim_feedforward=8, dropout=0.0, batch_first=True).eval()


@case()
def imports_inside_the_function(x: torch.Tensor) -> Any:
    import collections.abc as cabc

    import torch.nn.functional
    from torch.nn import functional as fn

    return fn.relu(x) + torch.nn.functional.gelu(x), cabc.Mapping.__name__


@case()
def functional_call_with_other_tensors(x: torch.Tensor) -> Any:
    swapped = {name: p * 0.5 for name, p in _SEQ.named_parameters()}
    bn = {"1.running_mean": torch.ones(2)}
    return torch.func.functional_call(_SEQ, swapped, (x,)), torch.func.functional_call(
        _CONV, bn, (x.reshape(1, 1, 4, 4),)
    )


# --------------------------------------------------------------------------- harder Python

_COUNTER = {"calls": 0}
_HISTORY: list[int] = []


@case()
def global_container_mutated(x: torch.Tensor) -> Any:
    _HISTORY.append(len(_HISTORY))
    return x * 2, len(_HISTORY) > 0


@case()
def generator_with_yield_from_and_return(x: torch.Tensor) -> Any:
    def inner(t: torch.Tensor) -> Any:
        yield t + 1
        yield t + 2
        return 10

    def outer(t: torch.Tensor) -> Any:
        result = yield from inner(t)
        yield t * result

    return list(outer(x))


@case()
def generator_send(x: torch.Tensor) -> Any:
    def acc() -> Any:
        total = 0.0
        while True:
            got = yield total
            total += got

    g = acc()
    next(g)
    g.send(1.5)
    return x * g.send(2.0)


@case()
def class_defined_inside_the_function(x: torch.Tensor) -> Any:
    class Local:
        def __init__(self, k: float) -> None:
            self.k = k

        def scale(self, t: torch.Tensor) -> torch.Tensor:
            return t * self.k

    return Local(3.0).scale(x)


@case()
def late_binding_closures_in_a_loop(x: torch.Tensor) -> Any:
    fns = [lambda t: t * i for i in range(3)]
    bound = [lambda t, i=i: t * i for i in range(3)]
    return [f(x) for f in fns], [f(x) for f in bound]


@case()
def explicit_two_argument_super(x: torch.Tensor) -> Any:
    class A:
        def f(self, t: torch.Tensor) -> torch.Tensor:
            return t + 1

    class B(A):
        def f(self, t: torch.Tensor) -> torch.Tensor:
            return super().f(t) * 2

    return B().f(x)


class _Meta(type):
    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        obj = super().__call__(*args, **kwargs)
        obj.made_by_meta = True
        return obj


class _WithMeta(metaclass=_Meta):
    def __init__(self, v: float) -> None:
        self.v = v


class _Registry:
    kinds: list[str] = []

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _Registry.kinds.append(cls.__name__)


class _Plugin(_Registry):
    pass


@case()
def metaclass_call_and_init_subclass(x: torch.Tensor) -> Any:
    obj = _WithMeta(2.0)
    return x * obj.v, obj.made_by_meta, "_Plugin" in _Registry.kinds


class _Tracked:
    def __init__(self) -> None:
        self.reads = 0
        self.v = 3.0

    def __getattribute__(self, name: str) -> Any:
        if name == "v":
            object.__setattr__(self, "reads", object.__getattribute__(self, "reads") + 1)
        return object.__getattribute__(self, name)


@case()
def getattribute_override(x: torch.Tensor) -> Any:
    t = _Tracked()
    return x * t.v + t.v, t.reads


class _Celsius:
    def __get__(self, obj: Any, owner: Any = None) -> float:
        return 100.0 if obj is None else obj._c

    def __set__(self, obj: Any, value: float) -> None:
        obj._c = value - 273.15


class _Thermo:
    temp = _Celsius()


@case()
def custom_data_descriptor(x: torch.Tensor) -> Any:
    th = _Thermo()
    th.temp = 300.0
    return x * th.temp, _Thermo.temp


@case()
def sys_and_os_queries(x: torch.Tensor) -> Any:
    import os
    import sys

    big = sys.version_info >= (3, 8)
    return x * big, sys.maxsize > 2**31, os.sep == "/"


@case()
def torch_environment_queries(x: torch.Tensor) -> Any:
    return (
        x * torch.cuda.is_available(),
        torch.distributed.is_available(),
        torch.backends.cudnn.enabled,
        torch.get_default_dtype(),
    )


@case()
def inspect_signature_of_a_function(x: torch.Tensor) -> Any:
    import inspect

    params = list(inspect.signature(_twice).parameters)
    return x * len(params), params


@case()
def dict_views_follow_changes(x: torch.Tensor) -> Any:
    d = {"a": 1}
    keys = d.keys()
    d["b"] = 2
    return x * len(keys), list(keys), list(reversed(d)), list(d.values())


@case()
def aliased_lists(x: torch.Tensor) -> Any:
    a = b = []
    a.append(x)
    b.append(x * 2)
    return len(a), a[1], a is b


@case()
def zip_unequal_and_multi_map(x: torch.Tensor) -> Any:
    return list(zip([1, 2, 3], "ab")), list(map(operator.add, [1, 2], [10, 20])), x * 1


@case()
def number_methods(x: torch.Tensor) -> Any:
    n = x.shape[0] * 5
    return x * n.bit_length(), (2.0).is_integer(), hex(n), (7).to_bytes(2, "big"), float(n).hex()


@case()
def tuple_ordering(x: torch.Tensor) -> Any:
    return x * ((1, 2) < (1, 3)), max([(1, "b"), (1, "c")]), sorted([(2, 1), (1, 2)])


class _Cached(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        self.last = x.detach()
        return self.lin(x)


_CACHED = _Cached()


@case()
def module_attributes_written_in_forward(x: torch.Tensor) -> Any:
    out = _CACHED(x)
    return out, _CACHED.last


@case()
def no_grad_decorator_on_an_inner_function(x: torch.Tensor) -> Any:
    @torch.no_grad()
    def frozen(t: torch.Tensor) -> torch.Tensor:
        return t * 2

    y = frozen(x)
    return y, y.requires_grad, torch.is_grad_enabled()


@case()
def contextmanager_generator(x: torch.Tensor) -> Any:
    import contextlib

    log = []

    @contextlib.contextmanager
    def scope(name: str) -> Any:
        log.append("in " + name)
        yield name.upper()
        log.append("out " + name)

    with scope("a") as tag:
        y = x * len(tag)
    return y, log


@case()
def tensor_setitem_with_tensor_indices(x: torch.Tensor) -> Any:
    y = x.clone()
    rows = torch.tensor([0, 2])
    y[rows] = 0.0
    y[rows, rows] = 5.0
    y[:, torch.tensor([True, False, True, False])] *= 2
    return y


@case(inputs=lambda: (torch.randn(4, 4, requires_grad=True),))
def data_and_grad_reads(x: torch.Tensor) -> Any:
    return x.data * 2, x.grad is None, x.is_leaf


@case()
def parameter_made_in_the_frame(x: torch.Tensor) -> Any:
    p = nn.Parameter(torch.ones(4))
    return x * p, isinstance(p, nn.Parameter), p.requires_grad


@case()
def warnings_warn_inside(x: torch.Tensor) -> Any:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.warn("careful", UserWarning, stacklevel=1)
    return x + 1


@case()
def string_building_in_a_loop(x: torch.Tensor) -> Any:
    parts = []
    for i in range(3):
        parts.append(f"layer{i}")
    key = ".".join(parts)
    return x * len(key), key.split(".")[-1], key.count("layer"), key.find("1")


@case()
def nested_data_structures(x: torch.Tensor) -> Any:
    state = {"layers": [{"w": x, "b": 1.0}, {"w": x * 2, "b": 2.0}]}
    total = sum(layer["w"] * layer["b"] for layer in state["layers"])
    state["layers"][0]["w"] = total
    return state


@case()
def tensor_bool_on_a_scalar_python_branch(x: torch.Tensor) -> Any:
    n = torch.tensor(3)
    if n.item() > 2:
        return x * 2
    return x


@case()
def tensor_tolist_and_numpy_free_python(x: torch.Tensor) -> Any:
    vals = x[0].tolist()
    return x * len(vals), sum(vals) == sum(vals)


@case()
def torch_size_operations(x: torch.Tensor) -> Any:
    s = x.shape
    return (
        s + (1,),
        s[1:],
        torch.Size([s[0], 2]),
        s.numel(),
        x.view(*s[:-1], 2, 2).shape,
        isinstance(s, tuple),
    )


@case()
def dtype_dispatch_tables(x: torch.Tensor) -> Any:
    eps = {torch.float32: 1e-6, torch.float64: 1e-12}[x.dtype]
    return x + eps, x.dtype in (torch.float16, torch.bfloat16)


@case()
def any_all_on_generators_of_shapes(x: torch.Tensor) -> Any:
    ts = [x, x[:2], x[:, :1]]
    return any(t.shape[0] == 2 for t in ts), all(t.dim() == 2 for t in ts), x * len(ts)


# --------------------------------------------------------------------------- the object model:
# classes made in the frame, metaclasses, grad-mode decorators, signatures, attribute deletion,
# identity and functions that outlive the frame


@case()
def class_statement_with_class_attributes(x: torch.Tensor) -> Any:
    class Scaled:
        factor = 2.0
        names: list[str] = []

        @staticmethod
        def twice(t: torch.Tensor) -> torch.Tensor:
            return t * 2

    Scaled.names.append("a")
    return Scaled.twice(x) * Scaled.factor, Scaled.names


@case()
def true_two_argument_super(x: torch.Tensor) -> Any:
    class Base:
        def f(self, t: torch.Tensor) -> torch.Tensor:
            return t - 1

    class Child(Base):
        def f(self, t: torch.Tensor) -> torch.Tensor:
            return super().f(t) * 3

    return Child().f(x)


class _Tagged(type):
    def __call__(cls, *args: Any, tag: str = "none", **kwargs: Any) -> Any:
        obj = super().__call__(*args, **kwargs)
        obj.tag = tag
        return obj


class _Point(metaclass=_Tagged):
    def __init__(self, x: Any, scale: float = 1.0) -> None:
        self.x = x * scale


@case()
def metaclass_call_with_keywords(x: torch.Tensor) -> Any:
    p = _Point(x, scale=2.0, tag="p")
    q = _Point(x + 1)
    return p.x + q.x, p.tag, q.tag, type(p).__name__


class _TwoStep(type):
    def __call__(cls, *args: Any) -> Any:
        obj = cls.__new__(cls)
        obj.__init__(*args)
        obj.ready = True
        return obj


class _Layer(metaclass=_TwoStep):
    def __init__(self, w: float) -> None:
        self.w = w


@case()
def metaclass_call_making_the_instance_by_hand(x: torch.Tensor) -> Any:
    layer = _Layer(2.0)
    return x * layer.w, layer.ready, isinstance(layer, _Layer)


class _Interned:
    def __new__(cls, v: float) -> Any:
        obj = super().__new__(cls)
        obj.v = v * 2
        return obj

    def __init__(self, v: float) -> None:
        self.w = v


@case()
def custom_new_then_init(x: torch.Tensor) -> Any:
    o = _Interned(1.5)
    return x * o.v + o.w, type(o).__name__


class _Validated(type):
    def __call__(cls, v: float) -> Any:
        if v < 0:
            raise ValueError(f"{cls.__name__} needs v >= 0")
        return super().__call__(v)


class _Positive(metaclass=_Validated):
    def __init__(self, v: float) -> None:
        self.v = v


@case()
def metaclass_call_raising_is_caught(x: torch.Tensor) -> Any:
    try:
        _Positive(-1.0)
        caught = ""
    except ValueError as e:
        caught = str(e)
    return x * _Positive(3.0).v, caught


@case(inputs=lambda: (torch.randn(4, 4, requires_grad=True),))
def no_grad_decorator_on_a_grad_input(x: torch.Tensor) -> Any:
    @torch.no_grad()
    def frozen(t: torch.Tensor) -> torch.Tensor:
        return t * 2

    y = frozen(x)
    z = x * 3
    return y, y.requires_grad, z.requires_grad, torch.is_grad_enabled()


@case(inputs=lambda: (torch.randn(4, 4, requires_grad=True),))
def enable_grad_decorator_inside_no_grad(x: torch.Tensor) -> Any:
    @torch.enable_grad()
    def tracked(t: torch.Tensor) -> torch.Tensor:
        return t * 2

    with torch.no_grad():
        a = tracked(x)
        b = x * 2
    return a.requires_grad, b.requires_grad, a.detach(), b


@case(inputs=lambda: (torch.randn(4, 4, requires_grad=True),))
def no_grad_decorated_closure_raising(x: torch.Tensor) -> Any:
    limit = 100.0

    @torch.no_grad()
    def checked(t: torch.Tensor, v: float) -> torch.Tensor:
        if v > limit:
            raise ValueError("too big")
        return t * v

    try:
        checked(x, 1000.0)
        msg = ""
    except ValueError as e:
        msg = str(e)
    y = checked(x, 2.0)
    return y, msg, torch.is_grad_enabled(), (x * 1).requires_grad


@case(inputs=lambda: (torch.randn(4, 4, requires_grad=True),))
def no_grad_decorator_on_a_lambda(x: torch.Tensor) -> Any:
    halve = torch.no_grad()(lambda t: t / 2)
    y = halve(x)
    return y, y.requires_grad


def _scaled(t: torch.Tensor, k: float = 2.0, *rest: Any, flag: bool = False, **kw: Any) -> Any:
    return t * k


@case()
def inspect_signature_kinds_and_defaults(x: torch.Tensor) -> Any:
    import inspect

    sig = inspect.signature(_scaled)
    names = [p for p in sig.parameters]
    kinds = [str(p.kind) for p in sig.parameters.values()]
    defaults = {k: p.default for k, p in sig.parameters.items() if p.default is not p.empty}
    return x * len(names), names, kinds, defaults


@case()
def inspect_signature_filters_keyword_arguments(x: torch.Tensor) -> Any:
    import inspect

    options = {"k": 3.0, "unused": 1, "flag": True}
    accepted = set(inspect.signature(_scaled).parameters)
    kept = {k: v for k, v in options.items() if k in accepted}
    return _scaled(x, **kept), sorted(kept)


class _Box:
    pass


@case(inputs=lambda: (torch.randn(4, 4), _Box()))
def delattr_on_an_object_from_outside(x: torch.Tensor, box: Any) -> Any:
    box.tmp = x * 2
    box.keep = 1
    y = box.tmp + 1
    del box.tmp
    return y, hasattr(box, "tmp"), sorted(vars(box))


def _box_with_attrs() -> tuple[Any, ...]:
    b = _Box()
    b.a, b.b = 1.0, 2.0
    return torch.randn(4, 4), b


@case(inputs=_box_with_attrs)
def delattr_of_an_existing_attribute_then_read_back(x: torch.Tensor, box: Any) -> Any:
    delattr(box, "a")
    try:
        box.a
        missing = False
    except AttributeError:
        missing = True
    return x * box.b, missing, sorted(vars(box))


@case()
def id_of_objects_made_in_the_frame(x: torch.Tensor) -> Any:
    a: list[Any] = []
    b = a
    c: list[Any] = []
    seen = {id(a): "a"}
    return x * 2, id(a) == id(b), id(a) == id(c), seen.get(id(b)), id(c) in seen


@case()
def id_keyed_memo_of_tensors(x: torch.Tensor) -> Any:
    y = x * 2
    memo: dict[int, torch.Tensor] = {}
    for t in (x, y, x):
        if id(t) not in memo:
            memo[id(t)] = t + 1
    return len(memo), sum(memo.values())


@case()
def closure_returned_from_the_frame(x: torch.Tensor) -> Any:
    k = 3

    def scale(t: torch.Tensor) -> torch.Tensor:
        return t * k

    return scale(x), scale


@case(inputs=lambda: (torch.randn(4, 4), _Box()))
def closure_stored_on_an_outside_object(x: torch.Tensor, box: Any) -> Any:
    offset = 1.5
    box.fn = lambda t: t + offset
    return box.fn(x)


@case()
def closure_over_a_tensor_escapes(x: torch.Tensor) -> Any:
    y = x * 2

    def add_y(t: torch.Tensor) -> torch.Tensor:
        return t + y

    return [add_y]


class _Pooled:
    _free: list[Any] = []

    def __new__(cls, v: float) -> Any:
        if cls._free:
            return cls._free[-1]  # an existing instance: type.__call__ still runs __init__
        return super().__new__(cls)

    def __init__(self, v: float) -> None:
        self.v = v


@case()
def custom_new_returning_a_fresh_or_pooled_instance(x: torch.Tensor) -> Any:
    a = _Pooled(2.0)
    _Pooled._free.append(a)
    b = _Pooled(3.0)  # the pooled one, re-initialised by type.__call__
    _Pooled._free.clear()
    return x * a.v, a is b, b.v, type(a).__name__


class _Other:
    pass


class _Redirect:
    def __new__(cls, flag: bool) -> Any:
        return _Other() if flag else super().__new__(cls)

    def __init__(self, flag: bool) -> None:
        self.inited = True  # not run when __new__ gives another class's object


@case()
def custom_new_returning_another_class_skips_init(x: torch.Tensor) -> Any:
    a, b = _Redirect(True), _Redirect(False)
    return x + 1, type(a).__name__, hasattr(a, "inited"), b.inited


class _Shape(metaclass=_Tagged):
    sides = 0

    def __init__(self, sides: int) -> None:
        self.sides = sides


@case(inputs=lambda: (torch.randn(4, 4), _Box()))
def delattr_then_store_again_and_class_fallback(x: torch.Tensor, box: Any) -> Any:
    s = _Shape(4, tag="square")
    del s.sides  # made here: the class attribute shows through
    box.n = 3
    del box.n
    box.n = 5
    return x * box.n + s.sides, s.tag, hasattr(box, "n")


@case()
def id_of_dataclass_instances_as_memo_keys(x: torch.Tensor) -> Any:
    @dataclasses.dataclass
    class Node:
        w: float

    nodes = [Node(1.0), Node(2.0)]
    nodes.append(nodes[0])
    memo: dict[int, float] = {}
    total = 0.0
    for n in nodes:
        if id(n) in memo:
            continue
        memo[id(n)] = n.w
        total += n.w
    return x * total, len(memo)


@case(inputs=lambda: (torch.randn(4, 4, requires_grad=True),))
def no_grad_decorated_function_returned_and_called_again(x: torch.Tensor) -> Any:
    k = 3.0

    @torch.no_grad()
    def frozen(t: torch.Tensor) -> torch.Tensor:
        return t * k

    y = frozen(x)
    return y, y.requires_grad, (x * 2).requires_grad


class _Quacking(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return hasattr(obj, "quack")

    @property
    def label(cls) -> str:
        return cls.__name__.lower()

    def make(cls, v: float) -> Any:
        return cls(v)


class _DuckLike(metaclass=_Quacking):
    def __init__(self, v: float) -> None:
        self.v = v


class _Mallard:
    quack = True


@case()
def metaclass_instancecheck_is_called(x: torch.Tensor) -> Any:
    checks = (isinstance(_Mallard(), _DuckLike), isinstance(object(), _DuckLike),
              isinstance(_DuckLike(1.0), _DuckLike), isinstance(_Mallard(), (int, _DuckLike)))
    return x + 1, checks


@case()
def metaclass_property_and_method_on_the_class(x: torch.Tensor) -> Any:
    made = _DuckLike.make(3.0)
    return x * made.v, _DuckLike.label, type(made).__name__


class _PretendsToBeATensor:
    @property
    def __class__(self) -> type:  # type: ignore[override]
        return torch.Tensor


@case()
def isinstance_consults_a_class_property(x: torch.Tensor) -> Any:
    p = _PretendsToBeATensor()
    return x + 1, isinstance(p, torch.Tensor), isinstance(p, _PretendsToBeATensor), type(p).__name__


class _Shape(abc.ABC):
    @abc.abstractmethod
    def area(self) -> float: ...


class _Square(_Shape):
    def __init__(self, s: float) -> None:
        self.s = s

    def area(self) -> float:
        return self.s**2


@case()
def abstract_class_refuses_instances(x: torch.Tensor) -> Any:
    try:
        _Shape()  # type: ignore[abstract]
        msg = ""
    except TypeError as e:
        msg = str(e)
    return x * _Square(2.0).area(), msg


@case(inputs=lambda: (torch.randn(4, 4, requires_grad=True),))
def stacked_grad_mode_decorators(x: torch.Tensor) -> Any:
    @torch.no_grad()
    @torch.enable_grad()
    def inner(t: torch.Tensor) -> torch.Tensor:  # the innermost mode wins inside
        return t * 2

    @torch.enable_grad()
    @torch.no_grad()
    def frozen(t: torch.Tensor) -> torch.Tensor:
        return t * 3

    a, b = inner(x), frozen(x)
    return a.detach(), a.requires_grad, b, b.requires_grad, torch.is_grad_enabled()


# More cases, in modules of their own (each registers its cases into CASES).
from . import corpus_dunders_and_stdlib, corpus_python_features  # noqa: E402, F401
