"""The transformed code reads arguments, cells and globals by name (no locals()/globals()).

Each function is compiled through compile_api with a counting backend and compared with eager
on the same inputs; the shape of the transformed code is checked on the cache entry evalframe
holds for the function's code.
"""

from __future__ import annotations

import dis
from collections.abc import Callable
from typing import Any

import pytest
import torch
from counting_backend import Counting

import compile_api
import evalframe

SCALE = 3.0
w = torch.full((4,), 2.0)  # also the name of an argument of ``shadowing`` below
COUNTER_GLOBAL = 0


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    compile_api.reset()
    yield
    compile_api.reset()


def transformed(code: Any, index: int = 0) -> Any:
    return evalframe.cache_entries(code)[index].code


def names_loaded(code: Any) -> dict[str, set[str]]:
    """Opname -> the names it loads or stores, over the code object."""
    out: dict[str, set[str]] = {}
    for ins in dis.get_instructions(code):
        if isinstance(ins.argval, str):
            out.setdefault(ins.opname, set()).add(ins.argval)
    return out


def uses_scale(x: torch.Tensor) -> torch.Tensor:
    return x * SCALE + 1


def test_arguments_and_globals_are_read_by_name() -> None:
    backend = Counting()
    fn = compile_api.compile(uses_scale, backend=backend)
    x = torch.randn(4)
    torch.testing.assert_close(fn(x), uses_scale(x))
    code = transformed(uses_scale.__code__)
    loads = names_loaded(code)
    assert "locals" not in code.co_names and "globals" not in code.co_names
    assert "x" in loads["LOAD_FAST"]
    torch.testing.assert_close(fn(x + 1), uses_scale(x + 1))
    assert backend.count == 1


def read_w() -> torch.Tensor:
    return w


def shadowing(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    # read_w() reads the *global* w while this frame has an argument w.
    return x * read_w() + w


def test_global_shadowed_by_an_argument_reads_the_global() -> None:
    backend = Counting()
    fn = compile_api.compile(shadowing, backend=backend)
    x, arg = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(fn(x, arg), shadowing(x, arg))
    # The argument is read by name; the global only through the frame's globals dict.
    code = transformed(shadowing.__code__)
    assert "w" in names_loaded(code)["LOAD_FAST"]
    assert any("globals_fn" in name for name in code.co_names)
    global w
    old = w
    try:
        w = torch.full((4,), 5.0)  # another global tensor of the same kind: read, not baked in
        torch.testing.assert_close(fn(x, arg), shadowing(x, arg))
    finally:
        w = old
    assert backend.count == 1


def make_closure(k: float) -> Callable[[torch.Tensor], torch.Tensor]:
    bias = torch.ones(4)

    def inner(x: torch.Tensor) -> torch.Tensor:
        return x * k + bias

    return inner


def test_free_variables_are_read_from_their_cells() -> None:
    backend = Counting()
    inner = make_closure(2.0)
    fn = compile_api.compile(inner, backend=backend)
    x = torch.randn(4)
    torch.testing.assert_close(fn(x), inner(x))
    loads = names_loaded(transformed(inner.__code__))
    assert "bias" in loads.get("LOAD_DEREF", set())
    torch.testing.assert_close(fn(x * 2), inner(x * 2))
    assert backend.count == 1


def with_cell(x: torch.Tensor, y: torch.Tensor) -> Any:
    def add_y(t: torch.Tensor) -> torch.Tensor:
        return t + y  # y is a cell variable of with_cell

    return add_y(x) * 2, y


def test_cell_variable_argument_is_read_and_returned() -> None:
    backend = Counting()
    fn = compile_api.compile(with_cell, backend=backend)
    x, y = torch.randn(3), torch.randn(3)
    got, got_y = fn(x, y)
    want, want_y = with_cell(x, y)
    torch.testing.assert_close(got, want)
    assert got_y is y and want_y is y
    assert backend.count == 1


def bump(x: torch.Tensor) -> torch.Tensor:
    global COUNTER_GLOBAL
    COUNTER_GLOBAL = COUNTER_GLOBAL + 1
    return x + COUNTER_GLOBAL


def test_global_rebinding_is_replayed() -> None:
    global COUNTER_GLOBAL
    backend = Counting()
    fn = compile_api.compile(bump, backend=backend)
    x = torch.randn(2)
    COUNTER_GLOBAL = 0
    got = fn(x)
    after_compiled = COUNTER_GLOBAL
    COUNTER_GLOBAL = 0
    want = bump(x)
    torch.testing.assert_close(got, want)
    assert after_compiled == COUNTER_GLOBAL == 1
    assert "globals" not in transformed(bump.__code__).co_names


def kw_and_star(a: torch.Tensor, *rest: torch.Tensor, scale: float = 2.0, **extra: Any) -> Any:
    return a * scale + rest[0] + extra["b"]


def test_star_args_kwonly_and_kwargs_are_read_by_name() -> None:
    backend = Counting()
    fn = compile_api.compile(kw_and_star, backend=backend)
    a, r, b = torch.randn(3), torch.randn(3), torch.randn(3)
    torch.testing.assert_close(fn(a, r, scale=3.0, b=b), kw_and_star(a, r, scale=3.0, b=b))
    torch.testing.assert_close(fn(a, r * 2, scale=3.0, b=b), kw_and_star(a, r * 2, scale=3.0, b=b))
    assert backend.count == 1
    code = transformed(kw_and_star.__code__)
    assert "locals" not in code.co_names


OTHER = {"__name__": "strata_emit_other"}
exec(  # a function whose globals are another module's
    "import torch\nOFFSET = torch.full((3,), 4.0)\ndef shift(t):\n    return t + OFFSET\n",
    OTHER,
)


def test_another_modules_global_is_read_through_its_dict_without_globals_call() -> None:
    backend = Counting()
    shift = OTHER["shift"]

    def run(x: torch.Tensor) -> torch.Tensor:
        return shift(x) * 2

    fn = compile_api.compile(run, backend=backend)
    x = torch.randn(3)
    torch.testing.assert_close(fn(x), run(x))
    code = transformed(run.__code__)
    assert not any("globals_fn" in name for name in code.co_names)
    old = OTHER["OFFSET"]
    try:
        OTHER["OFFSET"] = torch.full((3,), -1.0)  # same kind of tensor: read, not baked in
        torch.testing.assert_close(fn(x), run(x))
    finally:
        OTHER["OFFSET"] = old
    assert backend.count == 1
