"""Corpus cases in the kinds of PyTorch's Dynamo tests (registered into
``corpus.CASES``): dunder fallbacks, exception forms, more of itertools/functools/enum/
dataclasses, string methods and dict operators. Our own programs, one behaviour each.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import functools
import itertools
import math
import operator
from typing import Any

import torch

from .corpus import case


class _Money:
    def __init__(self, cents: int) -> None:
        self.cents = cents

    def __eq__(self, other: object) -> Any:
        if isinstance(other, _Money):
            return self.cents == other.cents
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.cents)

    def __lt__(self, other: _Money) -> bool:
        return self.cents < other.cents


class _Range3:
    def __iter__(self) -> Any:
        yield 1
        yield 2
        yield 3

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return list(range(10))[index]
        return index * 10


@case()
def eq_notimplemented_falls_back_and_min_by_key(x: torch.Tensor) -> Any:
    a, b = _Money(5), _Money(5)
    cheapest = min([_Money(7), _Money(3), _Money(9)], key=lambda m: m.cents)
    by_attr = sorted([_Money(2), _Money(1)], key=operator.attrgetter("cents"))
    return x * cheapest.cents, a == b, a == 5, a != _Money(6), [m.cents for m in by_attr]


@case()
def iter_as_generator_method_and_slice_getitem(x: torch.Tensor) -> Any:
    r = _Range3()
    return x * sum(r), list(r), r[2:5], r[4], 2 in r


@case()
def raise_from_none_and_else_finally_order(x: torch.Tensor) -> Any:
    order: list[str] = []

    def check(v: int) -> int:
        try:
            if v < 0:
                raise ValueError("negative")
        except ValueError:
            order.append("except")
            raise KeyError(v) from None
        else:
            order.append("else")
            return v
        finally:
            order.append("finally")

    check(2)
    try:
        check(-1)
    except KeyError as e:
        order.append(f"{e.__suppress_context__} {e.__cause__}")
    return x + len(order), order


@case()
def failing_assert_is_caught(x: torch.Tensor) -> Any:
    try:
        assert x.shape[0] == 99, f"bad size {x.shape[0]}"
        msg = "ok"
    except AssertionError as e:
        msg = str(e)
    return x * 2, msg


@case()
def yield_from_delegates_send(x: torch.Tensor) -> Any:
    def inner() -> Any:
        got = yield "ready"
        while got is not None:
            got = yield got * 2
        return "done"

    def outer() -> Any:
        result = yield from inner()
        yield result

    g = outer()
    first = next(g)
    doubled = g.send(21)
    final = g.send(None)
    return x * doubled, first, final


@case()
def partial_of_a_method_and_its_fields(x: torch.Tensor) -> Any:
    scale = functools.partial(torch.mul, other=3.0)
    add_to = functools.partial(operator.add, 10)
    return scale(x), add_to(5), scale.keywords, add_to.args, add_to.func is operator.add


@case()
def itertools_combinatorics_and_zip_longest(x: torch.Tensor) -> Any:
    prod = list(itertools.product("ab", [1, 2]))
    perms = list(itertools.permutations(range(3), 2))
    combos = list(itertools.combinations_with_replacement("xy", 2))
    longest = list(itertools.zip_longest([1, 2, 3], "ab", fillvalue="-"))
    flat = list(itertools.chain.from_iterable([[1], [2, 3]]))
    starred = list(itertools.starmap(pow, [(2, 3), (3, 2)]))
    cyc = list(itertools.islice(itertools.cycle("ab"), 5))
    return x * len(perms), prod, combos, longest, flat, starred, cyc


class _Mode(enum.Enum):
    TRAIN = enum.auto()
    EVAL = enum.auto()

    @property
    def training(self) -> bool:
        return self is _Mode.TRAIN

    def scale(self) -> float:
        return 1.0 if self.training else 0.5


@case()
def enum_with_auto_methods_and_properties(x: torch.Tensor) -> Any:
    modes = list(_Mode)
    return x * _Mode.EVAL.scale(), [m.training for m in modes], _Mode.TRAIN.value, len(_Mode)


@dataclasses.dataclass(order=True)
class _Item:
    priority: int
    name: str = dataclasses.field(compare=False)
    total: float = dataclasses.field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self.total = self.priority * 1.5


@case()
def dataclass_order_post_init_and_field_options(x: torch.Tensor) -> Any:
    items = [_Item(3, "c"), _Item(1, "a"), _Item(2, "b")]
    ranked = sorted(items)
    return x * ranked[0].total, [i.name for i in ranked], _Item(1, "z") == _Item(1, "q")


@case()
def str_translate_format_map_and_bytes(x: torch.Tensor) -> Any:
    table = str.maketrans("abc", "xyz")
    text = "a-b-c".translate(table)
    mapped = "{w}x{h}".format_map({"w": 4, "h": 5})
    raw = "héllo".encode()
    return x * len(raw), text, mapped, raw.decode("utf-8").title(), b"ab" + b"cd"


@case()
def dict_union_operators_and_setdefault(x: torch.Tensor) -> Any:
    base = {"a": 1, "b": 2}
    merged = base | {"b": 3, "c": 4}
    base |= {"d": 5}
    base.setdefault("e", []).append(x)
    return merged, sorted(base), len(base["e"]), base.get("zz", 0)


@case()
def unbound_methods_and_builtins_as_functions(x: torch.Tensor) -> Any:
    words = list(map(str.upper, ["a", "bc"]))
    nums = list(map(int.__add__, [1, 2], [10, 20]))
    kept = list(filter(None, [0, 1, "", "x", None]))
    return x * sum(nums), words, kept, list(map(len, words))


@case()
def type_of_an_object_constructs_another(x: torch.Tensor) -> Any:
    m = _Money(4)
    twin = type(m)(m.cents * 2)
    return x * twin.cents, type(twin).__name__, isinstance(twin, (int, _Money)), issubclass(
        type(twin), object
    )


@case()
def getattr_with_a_default_and_vars(x: torch.Tensor) -> Any:
    m = _Money(3)
    m.note = "tip"  # type: ignore[attr-defined]
    names = sorted(vars(m))
    return x * getattr(m, "cents", 0), getattr(m, "missing", "default"), names, hasattr(m, "note")


@case()
def memoised_recursion_with_a_dict(x: torch.Tensor) -> Any:
    memo: dict[int, int] = {}

    def fib(n: int) -> int:
        if n in memo:
            return memo[n]
        memo[n] = n if n < 2 else fib(n - 1) + fib(n - 2)
        return memo[n]

    return x * fib(15), len(memo)


@case()
def lru_cache_on_an_inner_function(x: torch.Tensor) -> Any:
    @functools.cache
    def cube(n: int) -> int:
        return n**3

    return x * cube(3), cube(3) + cube(2)


@dataclasses.dataclass
class _Named:
    name: str
    size: int = 1


@case()
def dataclass_repr_and_str_behind_the_recursion_guard(x: torch.Tensor) -> Any:
    @dataclasses.dataclass
    class Local:
        k: float

    return x * _Named("n").size, repr(_Named("a", 2)), str(_Named("b")), f"{Local(1.5)!r}"


class _Node:
    def __init__(self, v: int, nxt: _Node | None = None) -> None:
        self.v, self.nxt = v, nxt

    def __iter__(self) -> Any:
        node: _Node | None = self
        while node is not None:
            yield node.v
            node = node.nxt


class _SizedMeta(type):
    def __len__(cls) -> int:
        return 3


class _WithMeta(metaclass=_SizedMeta):
    pass


@case()
def linked_list_iteration_and_a_metaclass_dunder(x: torch.Tensor) -> Any:
    chain = _Node(1, _Node(2, _Node(3)))
    return x * sum(chain), list(chain), len(_WithMeta)


class _Thermo:
    def __init__(self) -> None:
        self._c = 0.0

    @property
    def c(self) -> float:
        return self._c

    @c.setter
    def c(self, v: float) -> None:
        if v < -273:
            raise ValueError("too cold")
        self._c = v


@case()
def property_setter_validation_raises(x: torch.Tensor) -> Any:
    t = _Thermo()
    t.c = 5.0
    try:
        t.c = -300
        msg = ""
    except ValueError as e:
        msg = str(e)
    return x * t.c, msg


_P = collections.namedtuple("_P", "x y", defaults=(0,))


@case()
def namedtuple_defaults_make_and_field_defaults(x: torch.Tensor) -> Any:
    p = _P(1)
    q = p._replace(y=5)
    return x * (q.x + q.y), p._asdict(), _P._make([3, 4]), _P._field_defaults


@case()
def ordereddict_fromkeys_chainmap_and_counter_addition(x: torch.Tensor) -> Any:
    od = collections.OrderedDict.fromkeys("abc", 0)
    od["b"] += 1
    chained = collections.ChainMap({"a": 1}, {"a": 2, "b": 3})
    total = collections.Counter(a=2, b=1) + collections.Counter(a=1)
    return x * od["b"], list(od.items()), chained["a"], sorted(chained), total


@case()
def itertools_count_repeat_dropwhile(x: torch.Tensor) -> Any:
    it = itertools.count(5, 2)
    first = next(it)
    rest = [next(it) for _ in range(2)]
    dropped = list(itertools.dropwhile(lambda v: v < 3, [1, 3, 1]))
    return x * first, rest, list(itertools.repeat("z", 2)), dropped


@case()
def math_helpers_and_number_conversions(x: torch.Tensor) -> Any:
    return (
        x * math.prod([1, 2, 3]),
        math.isclose(0.1 + 0.2, 0.3),
        math.comb(5, 2),
        math.gcd(12, 18),
        int("ff", 16),
        float("1e-3"),
        f"{0.125:.1%}",
    )


class _Shared:
    count = 0

    def get(self) -> int:
        return self.count


class _SharedChild(_Shared):
    pass


@case()
def class_attribute_written_then_read_through_an_instance(x: torch.Tensor) -> Any:
    _Shared.count += 1
    seen = (_Shared().count, _SharedChild().get(), _SharedChild.count)
    _Shared.count -= 1  # leave the class as it was for the next call
    return x * seen[0], seen
