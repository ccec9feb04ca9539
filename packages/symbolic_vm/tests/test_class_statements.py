"""Class statements inside the compiled function (symbolic_vm/class_statements.py).

torch.compile 2.13 breaks at every class statement (``enable_trace_load_build_class`` is off by
default). Strata captures one whose body only binds names (methods, constants, staticmethod/
classmethod/property, annotations) when the class does not leave the frame, and breaks at the
statement otherwise. Each test compares results with eager (on every call) and the graph count
with torch.compile's in the same test (equal or fewer).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from object_model_harness import run_three_ways, same
from torch_reference import torch_reference

import compile_api

SCALE = 3.0


def _x() -> tuple[torch.Tensor]:
    return (torch.linspace(-2.0, 3.0, 4),)


def _plain(x: torch.Tensor) -> Any:
    class Foo:
        pass

    f = Foo()
    f.a = 2
    return x * f.a


def _methods_used_right_away(x: torch.Tensor) -> Any:
    class Foo:
        def __init__(self, k: float) -> None:
            self.k = k

        def scale(self, t: torch.Tensor) -> torch.Tensor:
            return t * self.k

        def __add__(self, other: Foo) -> Foo:
            return Foo(self.k + other.k)

    return (Foo(3.0) + Foo(1.0)).scale(x)


def _dataclass_in_the_function(x: torch.Tensor) -> Any:
    @dataclasses.dataclass(frozen=True)
    class P:
        a: float
        b: float = 1.0

    p = P(2.0)
    return x * p.a + p.b, p == P(2.0), p.b


def _closure_over_a_local(x: torch.Tensor) -> Any:
    k = 4.0
    y = x + 1  # a tensor the method closes over too

    class Foo:
        def f(self, t: torch.Tensor) -> torch.Tensor:
            return t * k + y

    first = Foo().f(x)
    k = 5.0  # the method sees the later store, as in Python
    return first, Foo().f(x)


def _members_and_globals(x: torch.Tensor) -> Any:
    class S:
        factor = SCALE

        @staticmethod
        def twice(t: torch.Tensor) -> torch.Tensor:
            return t * 2

        @property
        def p(self) -> int:
            return 3

        @p.setter
        def p(self, value: int) -> None:
            raise AttributeError("read-only")

        @classmethod
        def c(cls) -> float:
            return cls.factor

    return S.twice(x) * S.factor + S().p + S.c()


def _super_and_subclass(x: torch.Tensor) -> Any:
    class A:
        def f(self, t: torch.Tensor) -> torch.Tensor:
            return t + 1

    class B(A):
        def f(self, t: torch.Tensor) -> torch.Tensor:
            return super().f(t) * 2

    return B().f(x), isinstance(B(), A)


def _module_subclass(x: torch.Tensor) -> Any:
    class M(torch.nn.Module):
        def forward(self, t: torch.Tensor) -> torch.Tensor:
            return t.relu() + 1

    return M()(x)


CAPTURED: list[Callable[..., Any]] = [
    _plain, _methods_used_right_away, _dataclass_in_the_function, _closure_over_a_local,
    _members_and_globals, _super_and_subclass, _module_subclass,
]


@pytest.mark.parametrize("fn", CAPTURED, ids=lambda f: f.__name__.strip("_"))
def test_class_statement_is_captured_in_one_graph_without_breaks(fn: Callable[..., Any]) -> None:
    runs = run_three_ways(fn, _x, calls=2, fresh=True)
    same(runs.ours, runs.eager)
    assert runs.our_graphs == 1
    assert runs.our_graphs <= runs.their_graphs or runs.their_graphs == 0
    compile_api.reset()
    assert not compile_api.explain(fn)(*_x()).break_reasons


def _returns_the_class(x: torch.Tensor) -> Any:
    class Foo:
        pass

    return x + 1, Foo


def _returns_an_instance(x: torch.Tensor) -> Any:
    class Foo:
        def __init__(self) -> None:
            self.v = 1

    y = x * 2
    return y, Foo()


def test_a_class_leaving_the_frame_breaks_at_its_statement_and_is_fresh_per_call() -> None:
    for fn in (_returns_the_class, _returns_an_instance):
        compile_api.reset()
        compiled = compile_api.compile(fn)
        x = torch.randn(3)
        first, second = compiled(x), compiled(x)
        eager = fn(x)
        torch.testing.assert_close(first[0], eager[0])
        # eager makes a new class on every call: so does the compiled function
        kind = (lambda v: v) if fn is _returns_the_class else type
        assert kind(first[1]) is not kind(second[1])
        assert kind(first[1]).__qualname__ == kind(eager[1]).__qualname__
        reasons = [r.reason for r in compile_api.explain(fn)(x).break_reasons]
        assert any("leaves it" in r for r in reasons), reasons


def test_a_leaving_class_under_fullgraph_names_the_class_statement() -> None:
    compile_api.reset()
    with pytest.raises(compile_api.Unsupported, match="leaves it") as info:
        compile_api.compile(_returns_the_class, fullgraph=True)(torch.randn(3))
    assert info.value.lineno == _returns_the_class.__code__.co_firstlineno + 1


CALLS: list[str] = []


def _log(name: str) -> str:
    CALLS.append(name)
    return name


class _Hooked:
    def __init_subclass__(cls) -> None:
        CALLS.append(cls.__name__)


def _body_with_a_side_effect(x: torch.Tensor) -> Any:
    class Foo:
        tag = _log("body")

    return x * len(Foo.tag)


def _base_with_init_subclass(x: torch.Tensor) -> Any:
    class Sub(_Hooked):
        pass

    return x * len(Sub.__name__)


def _mutable_class_attribute(x: torch.Tensor) -> Any:
    class Reg:
        names: list[str] = []

    Reg.names.append("a")
    return x * len(Reg.names), list(Reg.names)


@pytest.mark.parametrize(
    "fn", [_body_with_a_side_effect, _base_with_init_subclass, _mutable_class_attribute],
    ids=lambda f: f.__name__.strip("_"),
)
def test_a_class_statement_running_user_code_runs_it_once_per_call(fn: Callable[..., Any]) -> None:
    CALLS.clear()
    x = torch.randn(3)
    eager = [fn(x) for _ in range(3)]
    eager_calls = list(CALLS)
    CALLS.clear()
    compile_api.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = compile_api.compile(fn)
        got = [compiled(x) for _ in range(3)]
    same(got, eager)
    assert CALLS == eager_calls
    torch._dynamo.reset()
    CALLS.clear()
    theirs = torch.compile(fn, backend="eager")
    with torch_reference():  # torch 2.11 returns zeros for _mutable_class_attribute
        same([theirs(x) for _ in range(3)], eager)
    torch._dynamo.reset()


LIMIT = 2.0


def _body_reads_a_global_before_binding_it(x: torch.Tensor) -> Any:
    class Cfg:
        LIMIT = LIMIT  # the global's value, then a class attribute of the same name

    return x * Cfg.LIMIT


def test_a_global_the_body_reads_is_guarded_even_when_the_body_rebinds_its_name() -> None:
    global LIMIT
    compile_api.reset()
    compiled = compile_api.compile(_body_reads_a_global_before_binding_it)
    x = torch.ones(2)
    try:
        torch.testing.assert_close(compiled(x), x * 2.0)
        LIMIT = 5.0
        torch.testing.assert_close(compiled(x), _body_reads_a_global_before_binding_it(x))
        torch.testing.assert_close(compiled(x), x * 5.0)
    finally:
        LIMIT = 2.0
    assert not compile_api.explain(_body_reads_a_global_before_binding_it)(x).break_reasons
