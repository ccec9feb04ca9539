"""Functions exercising every kind of control flow, used by the execution tests.

Each entry of SAMPLES is (function, list of argument tuples). The functions are deterministic and
return plain data, so an original and a reassembled copy can be compared call by call.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import Any


def try_except_finally(x: int) -> list[object]:
    log: list[object] = []
    try:
        try:
            log.append(10 // x)
            if x > 5:
                raise KeyError(x)
        except ZeroDivisionError as e:
            log.append(type(e).__name__)
            return log
        except (KeyError, ValueError) as e:
            log.append(("caught", e.args))
            raise ValueError("again") from e
        else:
            log.append("else")
        finally:
            log.append("finally")
    except ValueError as e:
        log.append(str(e))
    return log


def return_in_finally(x: int) -> object:
    try:
        if x:
            raise RuntimeError("boom")
        return "body"
    finally:
        if x > 1:
            return "finally wins"  # noqa: B012


class Recorder:
    def __init__(self, log: list[str], name: str, suppress: bool = False) -> None:
        self.log, self.name, self.suppress = log, name, suppress

    def __enter__(self) -> Recorder:
        self.log.append(f"enter {self.name}")
        return self

    def __exit__(self, et: object, ev: object, tb: object) -> bool:
        self.log.append(f"exit {self.name} {getattr(et, '__name__', None)}")
        return self.suppress


def with_blocks(x: int) -> list[str]:
    log: list[str] = []
    with Recorder(log, "outer", suppress=True):
        with Recorder(log, "a") as a, Recorder(log, "b"):
            log.append(a.name)
            if x == 1:
                raise IndexError
            if x == 2:
                return log
        for i in range(3):
            with Recorder(log, f"loop{i}"):
                if i == x:
                    break
                if i == 1:
                    continue
                log.append(str(i))
    return log


def generator(n: int) -> list[object]:
    def gen(k: int) -> Generator[int, int | None, str]:
        total = 0
        for i in range(k):
            try:
                got = yield i * i
            except ValueError:
                got = -1
            total += got or 0
        return f"total={total}"

    def delegate(k: int) -> Generator[int, int | None, str]:
        result = yield from gen(k)
        yield 1000
        return result

    out: list[object] = []
    g = delegate(n)
    try:
        out.append(next(g))
        out.append(g.send(5))
        out.append(g.throw(ValueError))
        while True:
            out.append(next(g))
    except StopIteration as stop:
        out.append(stop.value)
    out.append(list(gen(n)))
    return out


def comprehensions(n: int) -> tuple[object, ...]:
    scale = 3
    squares = [i * i for i in range(n) if i % 2]
    table = {i: [j * scale for j in range(i)] for i in range(n)}
    unique = {i % 3 for i in range(n)}
    lazy = sum(x for x in squares if x > 1)
    funcs = [lambda y, i=i: y + i * scale for i in range(n)]
    nested = [[a * b for b in range(a)] for a in range(n)]
    i = "outer i survives"
    return squares, table, unique, lazy, [f(1) for f in funcs], nested, i


def loops(n: int) -> list[object]:
    out: list[object] = []
    i = 0
    while i < n:
        i += 1
        if i == 2:
            continue
        if i > 6:
            break
        out.append(i)
    else:
        out.append("while-else")
    for j in range(n):
        for k in range(j):
            if (j + k) % 4 == 3:
                break
        else:
            out.append(("no break", j))
    return out


def match_statement(value: Any) -> object:
    match value:
        case 0 | 1:
            return "small"
        case [x, y, *rest] if x < y:
            return ("ascending", x, y, rest)
        case [x, *_]:
            return ("seq", x)
        case {"kind": "point", "x": px, **others}:
            return ("point", px, others)
        case Recorder(name=name):
            return ("recorder", name)
        case str() as s if s:
            return ("str", s)
        case _:
            return "other"


def closures(n: int) -> list[int]:
    count = 0

    def bump(by: int) -> int:
        nonlocal count
        count += by
        return count

    def make_adder(k: int) -> Callable[[int], int]:
        def add(v: int) -> int:
            return v + k + count

        return add

    out = [bump(i) for i in range(n)]
    out.append(make_adder(100)(1))
    return out


class Base:
    def describe(self, x: int) -> str:
        return f"base {x}"


class Derived(Base):
    def describe(self, x: int) -> str:
        return "derived " + super().describe(x * 2)


def super_calls(x: int) -> str:
    return Derived().describe(x)


def exception_groups(x: int) -> list[str]:
    log: list[str] = []
    try:
        raise ExceptionGroup("g", [ValueError(x), TypeError(x)][: x + 1])
    except* ValueError as eg:
        log.append(f"value {len(eg.exceptions)}")
    except* TypeError as eg:
        log.append(f"type {len(eg.exceptions)}")
    return log


def coroutine(x: int) -> list[object]:
    class Ready:
        def __await__(self) -> Iterator[None]:
            yield None
            return None

    async def inner(v: int) -> int:
        await Ready()
        return v * 2

    async def outer(v: int) -> list[int]:
        out = []
        for i in range(v):
            out.append(await inner(i))
        async with _AsyncCM(out):
            out.append(-1)
        return out

    coro = outer(x)
    steps = 0
    while True:
        try:
            coro.send(None)
            steps += 1
        except StopIteration as stop:
            return [stop.value, steps]


class _AsyncCM:
    def __init__(self, out: list[int]) -> None:
        self.out = out

    async def __aenter__(self) -> None:
        self.out.append(100)

    async def __aexit__(self, *exc: object) -> None:
        self.out.append(200)


def big_function(x: int) -> int:
    # Long enough that its jumps need EXTENDED_ARG once NOPs are spread through it.
    total = 0
    for i in range(x):
        if i % 2:
            total += i
        elif i % 3:
            total -= i
        else:
            total *= 2
        try:
            total //= (i % 5) or 1
        except ZeroDivisionError:
            total = -total
    return total


SAMPLES: list[tuple[Callable[..., Any], list[tuple[Any, ...]]]] = [
    (try_except_finally, [(0,), (1,), (7,)]),
    (return_in_finally, [(0,), (1,), (2,)]),
    (with_blocks, [(0,), (1,), (2,), (3,)]),
    (generator, [(0,), (3,)]),
    (comprehensions, [(0,), (5,)]),
    (loops, [(0,), (4,), (10,)]),
    (
        match_statement,
        [(0,), ([1, 2, 3],), ([3, 1],), ({"kind": "point", "x": 1, "y": 2},), ("s",), (2.5,)],
    ),
    (closures, [(0,), (4,)]),
    (super_calls, [(3,)]),
    (exception_groups, [(0,), (1,)]),
    (coroutine, [(0,), (3,)]),
    (big_function, [(0,), (17,)]),
]
