"""Exceptions inside the traced code (handlers/exceptions.py and Interpreter._catch): raise,
try/except/else/finally, raise from, assert, builtins raising on tracked values, user exception
classes; an exception escaping the compiled function is eager's (type, args, __cause__), after
eager's side effects.

Each case runs eagerly, under compile_api.compile and under torch.compile with counting backends
(object_model_harness): equal results and no more graphs than torch.compile.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from object_model_harness import run_three_ways, same

import compile_api

pytestmark = pytest.mark.usefixtures("errors_raise")


def lookup_or_none(d: dict[str, int], k: str) -> int | None:
    try:
        return d[k]
    except KeyError:
        return None


def dict_key_errors(x: torch.Tensor, d: dict[str, int]) -> Any:
    a, b = lookup_or_none(d, "a"), lookup_or_none(d, "zz")
    return x * a, b


def test_key_error_from_a_dict_lookup_is_caught_in_an_inlined_function() -> None:
    runs = run_three_ways(dict_key_errors, lambda: (torch.ones(2), {"a": 3}))
    same(runs.ours, runs.eager)
    assert runs.our_graphs == 1 <= runs.their_graphs


class ModelError(ValueError):
    def __init__(self, what: str, code: int) -> None:
        super().__init__(what, code)
        self.code = code


def user_exception(x: torch.Tensor) -> Any:
    try:
        raise ModelError("bad", 3)
    except ValueError as e:
        y = x + e.code + len(e.args)
    else:
        y = x - 100
    finally:
        x = x * 2
    return x, y


def test_user_exception_class_is_caught_by_its_base_class_and_finally_runs() -> None:
    runs = run_three_ways(user_exception, lambda: (torch.ones(2),))
    same(runs.ours, runs.eager)
    assert runs.our_graphs == 1  # torch.compile 2.13 runs this frame eagerly (0 graphs)


def index_and_stop(x: torch.Tensor, xs: list[int]) -> Any:
    try:
        x = x + xs[5]
    except IndexError:
        x = x + 1
    else:
        x = x - 100
    it = iter(xs)
    total = 0
    while True:
        try:
            total += next(it)
        except StopIteration:
            break
    return x * total


def test_index_error_and_stop_iteration_from_builtins_are_caught() -> None:
    runs = run_three_ways(index_and_stop, lambda: (torch.ones(2), [1, 2, 3]))
    same(runs.ours, runs.eager)
    assert runs.our_graphs <= runs.their_graphs


def reraise(x: torch.Tensor) -> Any:
    try:
        try:
            raise KeyError("inner")
        except KeyError:
            x = x + 1
            raise
    except LookupError as outer:
        return x * 2, outer.args


def test_bare_raise_re_raises_the_handled_exception() -> None:
    runs = run_three_ways(reraise, lambda: (torch.ones(2),))
    same(runs.ours, runs.eager)
    assert runs.our_graphs == 1 <= runs.their_graphs


def escapes(x: torch.Tensor, log: list[int]) -> Any:
    log.append(1)
    x.add_(1)
    try:
        raise KeyError("k") from ValueError("why")
    finally:
        log.append(2)


def test_escaping_exception_has_eager_type_args_cause_after_eager_side_effects() -> None:
    def outcome(fn: Any) -> Any:
        x, log = torch.zeros(2), []
        with pytest.raises(KeyError) as info:
            fn(x, log)
        return info.value, x, log

    eager_exc, eager_x, eager_log = outcome(escapes)
    our_exc, our_x, our_log = outcome(compile_api.compile(escapes))
    assert type(our_exc) is KeyError and our_exc.args == eager_exc.args
    assert type(our_exc.__cause__) is ValueError
    assert our_exc.__cause__.args == eager_exc.__cause__.args
    same(our_x, eager_x)
    assert our_log == eager_log == [1, 2]


def checked(x: torch.Tensor, n: int) -> torch.Tensor:
    assert n > 0, "n must be positive"
    return x * n


def test_assert_passes_traced_and_failing_assert_raises_eager_assertion_error() -> None:
    runs = run_three_ways(checked, lambda: (torch.ones(2), 3))
    same(runs.ours, runs.eager)
    assert runs.our_graphs == 1 <= runs.their_graphs
    with pytest.raises(AssertionError, match="n must be positive"):
        compile_api.compile(checked)(torch.ones(2), 0)


class Suppress:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def __enter__(self) -> Suppress:
        return self

    def __exit__(self, kind: Any, value: Any, tb: Any) -> bool:
        self.seen.append(kind.__name__ if kind is not None else "none")
        return kind is KeyError


def suppressed(x: torch.Tensor) -> Any:
    manager = Suppress()
    with manager:
        x = x + 1
        raise KeyError("gone")
    return x * 2, manager.seen


def test_with_block_exit_suppresses_a_traced_exception() -> None:
    runs = run_three_ways(suppressed, lambda: (torch.ones(2),))
    same(runs.ours, runs.eager)
    assert runs.our_graphs <= max(runs.their_graphs, 1)


def attribute_error(x: torch.Tensor) -> Any:
    class Empty:
        pass

    try:
        return Empty().missing
    except AttributeError as e:
        return x + 1, str(e)


def test_attribute_error_on_a_missing_attribute_is_caught() -> None:
    runs = run_three_ways(attribute_error, lambda: (torch.ones(2),))
    same(runs.ours, runs.eager)
    assert runs.our_graphs <= max(runs.their_graphs, 1)


def folded_builtin_errors(x: torch.Tensor) -> Any:
    caught = []
    for text in ("12", "nope"):
        try:
            caught.append(int(text))
        except ValueError as error:
            caught.append(str(error))
    try:
        divmod(1, 0)
    except ZeroDivisionError as error:
        caught.append(type(error).__name__)
    return x * len(caught), caught


def test_errors_of_builtins_folded_on_constants_are_caught_as_in_eager() -> None:
    runs = run_three_ways(folded_builtin_errors, lambda: (torch.ones(2),))
    same(runs.ours, runs.eager)
    assert runs.ours[1][1] == "invalid literal for int() with base 10: 'nope'"
    assert runs.our_graphs == 1 and runs.our_graphs <= max(runs.their_graphs, 1)
