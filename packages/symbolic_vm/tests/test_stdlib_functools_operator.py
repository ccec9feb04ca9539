"""functools and operator inside compiled code (symbolic_vm.stdlib.functools_/operator_):
partial's attributes, lru_cache/cache wrappers run through, reduce, wraps; every kind of
operator function, itemgetter/attrgetter/methodcaller made inside or passed in. Each equals
eager, is captured whole, in no more graphs than torch.compile."""

from __future__ import annotations

import functools
import operator
from typing import Any

import pytest
import torch
from stdlib_harness import check_whole

import compile_api

pytestmark = pytest.mark.usefixtures("errors_raise")


def _x() -> tuple[Any, ...]:
    return (torch.arange(4.0),)


@functools.lru_cache(maxsize=8)
def _scale(n: int) -> float:
    return n * 0.5


@functools.cache
def _pair(n: int) -> tuple[int, int]:
    return n, n + 1


def _logged(fn: Any) -> Any:
    @functools.wraps(fn)
    def inner(*args: Any) -> Any:
        return fn(*args) + 1

    return inner


@_logged
def _wrapped(x: torch.Tensor) -> torch.Tensor:
    return x * 3


SCALE_BY_TWO = functools.partial(torch.mul, other=2)
GET_ONE = operator.itemgetter(1)
GET_SHAPE_AND_DTYPE = operator.attrgetter("shape", "dtype")
CALL_ADD = operator.methodcaller("add", 1, alpha=3)

CASES = {
    "partial_attributes": lambda x: (
        functools.partial(torch.add, x, alpha=2).keywords["alpha"] * x,
        functools.partial(torch.add, x).args[0] + 1,
        functools.partial(torch.sub, x).func(x, 1),
    ),
    "partial_from_outside": lambda x: (
        SCALE_BY_TWO(x), SCALE_BY_TWO.keywords["other"], SCALE_BY_TWO.func is torch.mul
    ),
    "lru_cache": lambda x: x * _scale(3) + _pair(2)[1],
    "reduce": lambda x: (
        functools.reduce(operator.add, [x, x * 2, x * 3]),
        functools.reduce(lambda a, b: a * b, [2, 3], x),
    ),
    "wraps": lambda x: (_wrapped(x), _wrapped.__name__),
    "wraps_inside": lambda x: _wraps_inside(x),
    "binary_and_compare": lambda x: (
        operator.add(x, 1), operator.sub(x, 2), operator.mul(x, x), operator.truediv(x, 2),
        operator.floordiv(x, 2), operator.mod(x, 3), operator.pow(x, 2), operator.neg(x),
        operator.lt(x, 2), operator.ge(x, 1), operator.eq(3, 3), operator.abs(-x),
        operator.matmul(x, x), operator.and_(6, 3), operator.or_(6, 3), operator.xor(6, 3),
        operator.lshift(1, 3), operator.rshift(8, 1), operator.invert(5), operator.index(7),
    ),
    "containers": lambda x: (
        operator.getitem([x, x * 2], 1), operator.contains([1, 2], 2), operator.truth([]),
        operator.not_(0), operator.is_(None, None), operator.is_not(x, x),
        operator.concat([x], [1]), operator.countOf([1, 2, 1], 1), operator.indexOf("abc", "c"),
        operator.call(torch.add, x, 1),
    ),
    "in_place": lambda x: _in_place(x),
    "getters_made_inside": lambda x: (
        operator.itemgetter(0, 2)([x, 1, x * 2]), operator.attrgetter("shape")(x),
        operator.methodcaller("mul", 2)(x),
        sorted([(2, x), (1, x * 2)], key=operator.itemgetter(0)),
    ),
    "getters_from_outside": lambda x: (
        GET_ONE([x, x + 1]), GET_SHAPE_AND_DTYPE(x), CALL_ADD(x),
    ),
}


def _repeat(times: int) -> Any:
    """A decorator factory applied inside the frame: functools.wraps on a local function."""

    def decorate(fn: Any) -> Any:
        @functools.wraps(fn)
        def run(*args: Any) -> Any:
            out = fn(*args)
            for _ in range(times - 1):
                out = fn(out)
            return out

        run.times = times  # type: ignore[attr-defined]
        return run

    return decorate


def _wraps_inside(x: torch.Tensor) -> Any:
    def step(t: torch.Tensor, k: float = 2.0) -> torch.Tensor:
        """Scale by k."""
        return t * k

    step.kind = "scale"  # type: ignore[attr-defined]
    thrice = _repeat(3)(step)
    logged = _logged(lambda t: t - 1)
    return (
        thrice(x), thrice.__name__, thrice.__qualname__, thrice.__doc__, thrice.__module__,
        thrice.__wrapped__ is step, thrice.kind, thrice.times, sorted(vars(thrice)),
        thrice.__annotations__, step.__defaults__, hasattr(thrice, "missing"),
        logged(x), logged.__name__,
    )


def _in_place(x: torch.Tensor) -> Any:
    items = [x]
    same = operator.iadd(items, [x * 2])
    counts = {"a": 1}
    flags = {1}
    operator.ior(flags, {2})
    y = x.clone()
    operator.imul(y, 3)
    operator.setitem(counts, "c", 3)
    operator.delitem(counts, "a")
    return items, same is items, counts, flags, y, operator.isub(5, 2)


@pytest.mark.parametrize("name", sorted(CASES))
def test_functools_and_operator_match_eager_in_one_graph(name: str) -> None:
    check_whole(CASES[name], _x)


def test_an_lru_cached_function_with_effects_breaks_instead_of_repeating_them() -> None:
    log: list[int] = []

    @functools.lru_cache
    def noisy(n: int) -> int:
        log.append(n)
        return n + 1

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * noisy(2)

    compiled = compile_api.compile(f, backend="eager")
    for _ in range(3):
        torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 3.0))
    assert log == [2]  # eager's cache: the effect happened once
