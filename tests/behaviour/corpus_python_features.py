"""Corpus cases (registered into ``corpus.CASES``), in the kinds of PyTorch's own Dynamo
behaviour tests (functions, misc, repros): user classes with dunders, exceptions inside the
traced code, generators, closures, the standard library (functools, itertools, collections,
operator, enum, dataclasses, contextlib), string formatting, descriptors, ``__init_subclass__``,
class decorators and class statements inside the function. Our own programs, one behaviour each.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import enum
import functools
import itertools
import operator
from typing import Any, NamedTuple

import torch

from .corpus import case

# --------------------------------------------------------------------------- user classes


@functools.total_ordering
class _Version:
    def __init__(self, major: int, minor: int) -> None:
        self.major, self.minor = major, minor

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Version):
            return NotImplemented
        return (self.major, self.minor) == (other.major, other.minor)

    def __lt__(self, other: _Version) -> bool:
        return (self.major, self.minor) < (other.major, other.minor)

    __hash__ = None  # type: ignore[assignment]


class _Acc:
    """A tensor accumulator with the numeric dunders: ``sum()`` starts at ``0 + acc``."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    def __add__(self, other: Any) -> _Acc:
        return _Acc(self.t + (other.t if isinstance(other, _Acc) else other))

    def __radd__(self, other: Any) -> _Acc:
        return _Acc(other + self.t)

    def __iadd__(self, other: Any) -> _Acc:
        self.t = self.t + (other.t if isinstance(other, _Acc) else other)
        return self

    def __neg__(self) -> _Acc:
        return _Acc(-self.t)

    def __matmul__(self, other: _Acc) -> torch.Tensor:
        return self.t @ other.t

    def __abs__(self) -> _Acc:
        return _Acc(self.t.abs())


class _Bag:
    """A sequence through ``__len__``/``__getitem__`` only (iteration by the old protocol)."""

    def __init__(self, *items: Any) -> None:
        self._items = list(items)

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i: int) -> Any:
        return self._items[i]


class _Flagged:
    def __init__(self, on: bool) -> None:
        self.on = on

    def __bool__(self) -> bool:
        return self.on


class _Sized:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


@case()
def total_ordering_sorts_user_objects(x: torch.Tensor) -> Any:
    vs = [_Version(1, 2), _Version(0, 9), _Version(1, 0)]
    ordered = sorted(vs)
    top = max(vs)
    return x * top.minor, [(v.major, v.minor) for v in ordered], _Version(1, 0) <= _Version(1, 0)


@case()
def numeric_dunders_radd_iadd_neg_matmul(x: torch.Tensor) -> Any:
    total = sum([_Acc(x), _Acc(x * 2)])
    total += 1
    total += _Acc(x)
    return (-total).t, abs(_Acc(x - 5)).t, _Acc(x) @ _Acc(x)


@case()
def sequence_protocol_through_getitem(x: torch.Tensor) -> Any:
    bag = _Bag(x, x + 1, x + 2)
    first, *rest = bag
    return first + sum(rest), list(reversed([t.sum() for t in bag]))[0], len(bag)


@case()
def truth_from_bool_and_len_dunders(x: torch.Tensor) -> Any:
    out = x
    if _Flagged(True):
        out = out + 1
    if not _Flagged(False):
        out = out * 2
    if _Sized(0):
        out = out - 100
    return out, bool(_Sized(3)), [bool(s) for s in (_Sized(0), _Sized(2))]


@case()
def callable_on_class_dict_entries(x: torch.Tensor) -> Any:
    names = [k for k, v in vars(_Acc).items() if callable(v)]
    return x * len(names), names, callable(_Acc), callable(x), callable(_Acc(x))


# --------------------------------------------------------------------------- exceptions


class _AppError(Exception):
    def __init__(self, code: int, msg: str) -> None:
        super().__init__(msg)
        self.code = code


@case()
def exception_chaining_cause_and_context(x: torch.Tensor) -> Any:
    try:
        try:
            {}["missing"]
        except KeyError as e:
            raise _AppError(7, "lookup failed") from e
    except _AppError as err:
        return x + err.code, type(err.__cause__).__name__, str(err), err.args


@case()
def finally_return_overrides(x: torch.Tensor) -> Any:
    def pick(t: torch.Tensor) -> torch.Tensor:
        try:
            return t + 1
        finally:
            t.mul_(1)  # runs before the return, changes nothing

    def swallow(t: torch.Tensor) -> torch.Tensor:
        for _ in range(2):
            try:
                raise ValueError("x")
            finally:
                break
        return t * 3

    return pick(x), swallow(x)


@case()
def bare_raise_reaches_outer_handler(x: torch.Tensor) -> Any:
    log = []

    def inner(n: int) -> int:
        try:
            return 10 // n
        except ZeroDivisionError:
            log.append("inner")
            raise

    try:
        inner(0)
    except ArithmeticError as e:
        log.append(type(e).__name__)
    return x * inner(5), log


@case()
def tuple_of_exception_types_and_value_error(x: torch.Tensor) -> Any:
    results = []
    for text in ("12", "x1", "3"):
        try:
            results.append(int(text))
        except (TypeError, ValueError) as e:
            results.append(-1)
            results.append(len(e.args))
    return x * sum(results), results


# --------------------------------------------------------------------------- generators


@case()
def generator_resumed_after_a_for_break(x: torch.Tensor) -> Any:
    def numbers() -> Any:
        k = 0
        while True:
            yield k
            k += 1

    gen = numbers()
    for n in gen:
        if n == 2:
            break
    return x * next(gen), next(gen)


@case()
def itertools_over_an_infinite_generator(x: torch.Tensor) -> Any:
    def powers() -> Any:
        p = 1
        while True:
            yield p
            p *= 2

    head = list(itertools.islice(powers(), 5))
    small = list(itertools.takewhile(lambda v: v < 10, powers()))
    return x * sum(head), small, list(itertools.compress("abcd", [1, 0, 1, 0]))


@case()
def generator_yielding_tensors_with_a_condition(x: torch.Tensor) -> Any:
    def rows(t: torch.Tensor) -> Any:
        for i in range(t.shape[0]):
            if i % 2 == 0:
                yield i, t[i] * i

    return {i: r for i, r in rows(x)}


# --------------------------------------------------------------------------- closures


@case()
def closures_made_in_a_loop_with_default_capture(x: torch.Tensor) -> Any:
    fns = [lambda t, k=k: t * k for k in range(3)]
    late = [lambda t: t * k for k in range(3)]  # noqa: B023 - late binding on purpose
    return [f(x) for f in fns], [f(x) for f in late]


@case()
def three_level_nonlocal_closures(x: torch.Tensor) -> Any:
    def outer() -> Any:
        count = 0

        def middle() -> Any:
            def inner() -> int:
                nonlocal count
                count += 1
                return count

            return inner

        return middle(), lambda: count

    bump, read = outer()
    bump()
    bump()
    return x * read(), read()


@case()
def decorator_factory_with_wraps(x: torch.Tensor) -> Any:
    def scaled(k: float) -> Any:
        def deco(fn: Any) -> Any:
            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                return fn(*args, **kwargs) * k

            return wrapper

        return deco

    @scaled(3.0)
    def double(t: torch.Tensor) -> torch.Tensor:
        """Doubles."""
        return t * 2

    return double(x), double.__name__, double.__doc__, double.__wrapped__(x)


# --------------------------------------------------------------------------- stdlib


@case()
def functools_reduce_with_operator_and_initial(x: torch.Tensor) -> Any:
    prod = functools.reduce(operator.mul, [1, 2, 3, 4], 1)
    stacked = functools.reduce(lambda a, b: a + b, [x, x * 2, x * 3])
    empty = functools.reduce(operator.add, [], 10)
    return stacked * prod, empty


@case()
def itertools_groupby_pairwise_accumulate(x: torch.Tensor) -> Any:
    words = ["apple", "avocado", "banana", "blueberry", "cherry"]
    groups = {k: len(list(g)) for k, g in itertools.groupby(words, key=operator.itemgetter(0))}
    pairs = list(itertools.pairwise([1, 2, 4, 7]))
    running = list(itertools.accumulate([1, 2, 3], operator.mul))
    return x * sum(b - a for a, b in pairs), groups, running


@case()
def ordereddict_move_to_end_and_popitem(x: torch.Tensor) -> Any:
    od = collections.OrderedDict(a=x, b=x + 1, c=x + 2)
    od.move_to_end("a")
    od.move_to_end("c", last=False)
    last_key, last = od.popitem()
    return list(od), last_key, last * 2


@case()
def defaultdict_grouping_and_counter_most_common(x: torch.Tensor) -> Any:
    groups: collections.defaultdict[int, list[int]] = collections.defaultdict(list)
    for n in range(7):
        groups[n % 3].append(n)
    counts = collections.Counter("mississippi")
    return x * len(groups[1]), dict(groups), counts.most_common(2)


@case()
def deque_rotate_and_maxlen(x: torch.Tensor) -> Any:
    d = collections.deque([1, 2, 3, 4], maxlen=4)
    d.rotate(1)
    d.append(5)
    d.appendleft(0)
    return x * d[0], list(d), d.maxlen


class _Level(enum.IntEnum):
    LOW = 1
    HIGH = 3


class _Perm(enum.Flag):
    R = 4
    W = 2
    X = 1


@case()
def enum_lookup_iteration_intenum_and_flags(x: torch.Tensor) -> Any:
    lvl = _Level(3)
    rw = _Perm.R | _Perm.W
    return (
        x * (lvl + 1),
        [m.name for m in _Level],
        _Level["LOW"].value,
        bool(rw & _Perm.W),
        bool(rw & _Perm.X),
    )


@dataclasses.dataclass
class _Config:
    width: int
    depth: int = 2
    tags: list[str] = dataclasses.field(default_factory=list)


@case()
def dataclasses_replace_asdict_and_fields(x: torch.Tensor) -> Any:
    cfg = _Config(4)
    wider = dataclasses.replace(cfg, width=8)
    names = [f.name for f in dataclasses.fields(cfg)]
    return x * wider.width, dataclasses.asdict(wider), names, dataclasses.astuple(cfg)


class _Span(NamedTuple):
    start: int
    stop: int = 10

    def length(self) -> int:
        return self.stop - self.start


@case()
def typed_namedtuple_defaults_methods_and_unpacking(x: torch.Tensor) -> Any:
    s = _Span(3)
    start, stop = s
    return x * s.length(), start, stop, s._asdict(), _Span._fields


@case()
def operator_methodcaller_and_dotted_attrgetter(x: torch.Tensor) -> Any:
    upper = operator.methodcaller("replace", "a", "o")
    shape_of = operator.attrgetter("shape", "dtype")
    first_two = operator.itemgetter(slice(0, 2))
    return upper("banana"), shape_of(x), first_two([x, x + 1, x + 2])


# --------------------------------------------------------------------------- strings


@case()
def format_specs_join_and_padding(x: torch.Tensor) -> Any:
    n = x.shape[0]
    text = f"{n:>5}|{3.14159:.2f}|{1234567:,}|{n:08b}|{'ab':^6}|{n!r}"
    joined = "-".join(str(i) for i in range(n))
    return x * len(text), text, joined, "7".zfill(3), "abc".center(7, "*")


@case()
def percent_format_with_a_mapping_and_str_methods(x: torch.Tensor) -> Any:
    row = "%(name)s=%(value).1f [%(n)d]" % {"name": "w", "value": 2.25, "n": 3}  # noqa: UP031
    parts = "a,b,,c".split(",")
    return x + len(row), row, parts, "Hello World".swapcase(), "x=1".partition("=")


# --------------------------------------------------------------------------- descriptors


class _Doubled:
    """A non-data descriptor that learns its name (``__set_name__``)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = "_" + name

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return getattr(obj, self.name) * 2


class _Holder:
    value = _Doubled()

    def __init__(self, v: float) -> None:
        self._value = v

    @functools.cached_property
    def expensive(self) -> float:
        return self._value + 100

    @property
    def scratch(self) -> float:
        return self._value

    @scratch.deleter
    def scratch(self) -> None:
        self._value = 0.0


@case()
def descriptor_with_set_name_and_cached_property(x: torch.Tensor) -> Any:
    h = _Holder(1.5)
    first = h.expensive
    h._value = 9.0
    second = h.expensive  # cached: not recomputed
    del h.scratch
    return x * h.value, first, second, h._value, "expensive" in vars(h)


class _Shape:
    sides = 0

    @classmethod
    def regular(cls, size: float) -> _Shape:
        made = cls()
        made.size = size  # type: ignore[attr-defined]
        return made


class _Tri(_Shape):
    sides = 3


@case()
def classmethod_constructor_through_a_subclass(x: torch.Tensor) -> Any:
    t = _Tri.regular(2.0)
    return x * t.sides * t.size, type(t).__name__, isinstance(t, _Shape)  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- class machinery


class _Plugin:
    registry: dict[str, type] = {}

    def __init_subclass__(cls, key: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _Plugin.registry[key or cls.__name__.lower()] = cls

    def run(self, t: torch.Tensor) -> torch.Tensor:
        return t


class _Twice(_Plugin, key="twice"):
    def run(self, t: torch.Tensor) -> torch.Tensor:
        return t * 2


class _Plus(_Plugin):
    def run(self, t: torch.Tensor) -> torch.Tensor:
        return t + 1


@case()
def init_subclass_registry_dispatch(x: torch.Tensor) -> Any:
    out = x
    for key in sorted(_Plugin.registry):
        out = _Plugin.registry[key]().run(out)
    return out, sorted(_Plugin.registry)


def _with_describe(cls: type) -> type:
    def describe(self: Any) -> str:
        return f"{type(self).__name__}({self.k})"

    cls.describe = describe  # type: ignore[attr-defined]
    return cls


@_with_describe
class _Tagged:
    def __init__(self, k: int) -> None:
        self.k = k


@case()
def class_decorator_adds_a_method(x: torch.Tensor) -> Any:
    t = _Tagged(3)
    return x * t.k, t.describe()  # type: ignore[attr-defined]


@case()
def class_statement_closing_over_locals(x: torch.Tensor) -> Any:
    scale = 2.5
    shift = x.mean()

    class Affine:
        def __init__(self, bias: float) -> None:
            self.bias = bias

        def __call__(self, t: torch.Tensor) -> torch.Tensor:
            return t * scale + shift + self.bias

    return Affine(1.0)(x)


@case()
def dataclass_defined_inside_the_function(x: torch.Tensor) -> Any:
    @dataclasses.dataclass(frozen=True)
    class Opts:
        gain: float
        bias: float = 0.5

        @property
        def total(self) -> float:
            return self.gain + self.bias

    o = Opts(2.0)
    return x * o.total, o == Opts(2.0, 0.5), dataclasses.astuple(o)


# --------------------------------------------------------------------------- contextlib


@case()
def exitstack_callbacks_run_in_reverse(x: torch.Tensor) -> Any:
    log: list[str] = []
    with contextlib.ExitStack() as stack:
        stack.callback(log.append, "first")
        stack.callback(log.append, "second")
        y = x * 2
    return y, log


@case()
def contextmanager_handles_an_exception_inside(x: torch.Tensor) -> Any:
    events: list[str] = []

    @contextlib.contextmanager
    def guarded() -> Any:
        events.append("enter")
        try:
            yield len(events)
        except KeyError as e:
            events.append(f"caught {e.args[0]}")
        finally:
            events.append("exit")

    with guarded() as n:
        y = x * n
        raise KeyError("k")
    return y, events


class _Recorder:
    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def __enter__(self) -> _Recorder:
        self.log.append(f"+{self.name}")
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.log.append(f"-{self.name}")
        return False


@case()
def nested_user_context_managers_in_one_with(x: torch.Tensor) -> Any:
    log: list[str] = []
    with _Recorder(log, "a") as a, _Recorder(log, "b") as b:
        y = x + len(a.name + b.name)
    return y, log


@case()
def contextmanager_lets_an_exception_through_or_replaces_it(x: torch.Tensor) -> Any:
    events: list[str] = []

    @contextlib.contextmanager
    def tracked(name: str) -> Any:
        events.append(f"+{name}")
        try:
            yield name
        finally:
            events.append(f"-{name}")

    @contextlib.contextmanager
    def translating() -> Any:
        try:
            yield
        except IndexError as e:
            raise ValueError("translated") from e

    try:
        with tracked("a"):
            [][1]  # noqa: PLE0643 - raised on purpose
    except IndexError:
        events.append("outer caught")
    try:
        with translating():
            [][2]  # noqa: PLE0643 - raised on purpose
    except ValueError as e:
        events.append(f"{e} from {type(e.__cause__).__name__}")
    return x + len(events), events


@case()
def generator_throw_resumes_at_the_yield(x: torch.Tensor) -> Any:
    def worker() -> Any:
        total = 0
        while True:
            try:
                total += yield total
            except ValueError:
                total = -total
            except KeyError:
                return

    g = worker()
    next(g)
    g.send(3)
    flipped = g.throw(ValueError("flip"))
    g.send(10)
    try:
        g.throw(KeyError)
        ended = False
    except StopIteration:
        ended = True
    return x * flipped, ended
