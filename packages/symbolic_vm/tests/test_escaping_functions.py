"""Functions made in the compiled frame that leave it (returned, stored on an outside object):
rebuilt after the graph from their code with fresh cells shared as eager shares them, so
calling them later gives eager's results; compared with eager (the returned functions are
called the same way on both sides) and with torch.compile's graph count in the same test."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch
from counting_backend import Counting

import compile_api

pytestmark = pytest.mark.usefixtures("errors_raise")


def _graphs(fn: Callable[..., Any], *args: Any) -> tuple[Any, int, int]:
    """``fn(*args)`` under compile_api (its result) and the graph counts of compile_api and of
    torch.compile on the same call."""
    ours = Counting()
    compile_api.reset()
    result = compile_api.compile(fn, backend=ours)(*args)
    theirs = Counting()
    torch._dynamo.reset()
    torch.compile(fn, backend=theirs)(*args)
    torch._dynamo.reset()
    return result, ours.count, theirs.count


def _scale_maker(x: torch.Tensor) -> Any:
    k = 3

    def scale(t: torch.Tensor) -> torch.Tensor:
        return t * k

    k = 5  # the cell's final value is the one the returned function sees
    return scale(x), scale


def test_a_returned_closure_sees_its_cells_final_value() -> None:
    x = torch.randn(4)
    (y, scale), ours, theirs = _graphs(_scale_maker, x)
    want_y, want_scale = _scale_maker(x)
    torch.testing.assert_close(y, want_y)
    torch.testing.assert_close(scale(x), want_scale(x))
    assert scale.__name__ == want_scale.__name__ and scale.__qualname__ == want_scale.__qualname__
    assert ours == 1 <= theirs


def _counter_pair(x: torch.Tensor) -> Any:
    n = 0

    def bump() -> int:
        nonlocal n
        n += 1
        return n

    def read() -> int:
        return n

    bump()
    return x + n, bump, read


def test_two_returned_closures_share_one_cell() -> None:
    x = torch.randn(3)
    (y, bump, read), ours, _ = _graphs(_counter_pair, x)
    _, want_bump, want_read = _counter_pair(x)
    torch.testing.assert_close(y, x + 1)
    assert [bump(), bump(), read()] == [want_bump(), want_bump(), want_read()] == [2, 3, 3]
    assert ours == 1


def _recursive(x: torch.Tensor) -> Any:
    def fact(n: int) -> int:
        return 1 if n <= 1 else n * fact(n - 1)

    return x * fact(3), fact


def test_a_returned_recursive_function_finds_itself_in_its_closure() -> None:
    x = torch.randn(2)
    (y, fact), ours, _ = _graphs(_recursive, x)
    torch.testing.assert_close(y, x * 6)
    assert fact(5) == 120
    assert ours == 1


def _over_a_tensor(x: torch.Tensor) -> Any:
    y = x.sin()

    def add_y(t: torch.Tensor, k: float = 2.0, *, m: int = 3) -> torch.Tensor:
        return t + y * k * m

    return add_y


def test_a_returned_function_keeps_a_graph_tensor_and_its_defaults() -> None:
    x = torch.randn(3)
    add_y, ours, theirs = _graphs(_over_a_tensor, x)
    want = _over_a_tensor(x)
    torch.testing.assert_close(add_y(x), want(x))
    torch.testing.assert_close(add_y(x, 1.0, m=1), want(x, 1.0, m=1))
    assert add_y.__defaults__ == want.__defaults__
    assert add_y.__kwdefaults__ == want.__kwdefaults__
    assert add_y.__annotations__ == want.__annotations__
    assert ours == 1 <= theirs


class Holder:
    pass


def _wrapped_onto(x: torch.Tensor, h: Holder) -> Any:
    def base(t: torch.Tensor) -> torch.Tensor:
        """Doubles."""
        return t * 2

    @functools.wraps(base)
    def wrapper(t: torch.Tensor) -> torch.Tensor:
        return base(t) + 1

    wrapper.calls = 0  # type: ignore[attr-defined]
    h.fn = wrapper  # type: ignore[attr-defined]
    return wrapper(x)


def test_a_wraps_wrapper_stored_on_an_outside_object_keeps_what_wraps_copied() -> None:
    x = torch.randn(3)
    ours_h, eager_h = Holder(), Holder()
    y, ours, _ = _graphs(_wrapped_onto, x, ours_h)
    torch.testing.assert_close(y, _wrapped_onto(x, eager_h))
    got, want = ours_h.fn, eager_h.fn  # type: ignore[attr-defined]
    torch.testing.assert_close(got(x), want(x))
    for name in ("__name__", "__qualname__", "__doc__", "__module__", "calls"):
        assert getattr(got, name) == getattr(want, name)
    torch.testing.assert_close(got.__wrapped__(x), want.__wrapped__(x))
    assert ours == 1


def _generator_maker(x: torch.Tensor) -> Any:
    step = 2

    def counting(n: int) -> Any:
        yield from range(0, n, step)

    return x * step, counting


def test_a_returned_generator_function_runs_as_eager() -> None:
    x = torch.randn(2)
    (_, counting), ours, _ = _graphs(_generator_maker, x)
    assert list(counting(7)) == list(_generator_maker(x)[1](7)) == [0, 2, 4, 6]
    assert ours == 1


def test_a_closure_over_the_frames_own_free_variable_still_runs_eagerly() -> None:
    outer = 4.0

    def frame(x: torch.Tensor) -> Any:
        def g(t: torch.Tensor) -> torch.Tensor:
            return t * outer

        return g

    compile_api.reset()
    g = compile_api.compile(frame)(torch.randn(2))  # the real cell must be shared: a break
    x = torch.randn(2)
    torch.testing.assert_close(g(x), x * outer)
    report = compile_api.explain(frame)(x)
    assert any("closes over a variable from outside" in r.reason for r in report.break_reasons)
