"""Under fullgraph=True the error for the most common break reasons says what to change for
that construct, naming compile_api's public API (never symbolic_vm's internal modules), and
still points at the user's line."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import compile_api

pytestmark = pytest.mark.usefixtures("errors_raise")


def _prints(x: torch.Tensor) -> torch.Tensor:
    print("x")
    return x + 1


def _branches_on_data(x: torch.Tensor) -> torch.Tensor:
    if x.sum() > 0:
        return x + 1
    return x - 1


def _breaks(x: torch.Tensor) -> torch.Tensor:
    compile_api.graph_break()
    return x + 1


@compile_api.disable
def _not_compiled(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def _calls_disabled(x: torch.Tensor) -> torch.Tensor:
    return _not_compiled(x) * 2


def _sets_threads(x: torch.Tensor) -> torch.Tensor:
    torch.set_num_threads(torch.get_num_threads())
    return x + 1


@pytest.mark.parametrize(
    ("fn", "advice"),
    [
        (_prints, "outside the function given to compile_api.compile"),
        (_sets_threads, "outside the function given to compile_api.compile"),
        (_branches_on_data, "torch.where or torch.cond"),
        (_breaks, "remove the compile_api.graph_break()"),
        (_calls_disabled, "wrapped in compile_api.disable"),
    ],
)
def test_fullgraph_error_hint_is_specific_to_the_construct(
    fn: Callable[[torch.Tensor], torch.Tensor], advice: str
) -> None:
    with pytest.raises(compile_api.Unsupported) as info:
        compile_api.compile(fn, backend="eager", fullgraph=True)(torch.ones(2))
    error = info.value
    assert advice in error.hint
    assert "without fullgraph=True" in error.hint
    assert "symbolic_vm" not in error.hint
    assert error.filename == __file__ and error.lineno > 0
    assert f"hint: {error.hint}" in str(error)
