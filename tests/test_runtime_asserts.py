"""torch._check on a data-dependent size (a nonzero's length) holds when the graph runs, as in
eager: the ShapeEnv's deferred assertions become graph nodes that every backend runs (found by
PyTorch's test_misc::test_cond_runtime_assert_generation: a failed check returned a value)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import compile_api


def _checked_nonzero(x: torch.Tensor) -> torch.Tensor:
    y = x.nonzero()
    torch._check(y.shape[0] % 4 == 0)
    return y * 2


@pytest.fixture(autouse=True)
def _dynamic_output_shapes() -> Iterator[None]:
    old = compile_api.config.capture_dynamic_output_shape_ops
    compile_api.config.capture_dynamic_output_shape_ops = True
    compile_api.reset()
    yield
    compile_api.config.capture_dynamic_output_shape_ops = old
    compile_api.reset()


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_a_failed_check_raises_and_a_passing_one_returns_eagers_result(backend: str) -> None:
    compiled = compile_api.compile(_checked_nonzero, fullgraph=True, backend=backend)
    passing = torch.tensor([[1.0, 0.0], [2.0, 3.0], [0.0, 4.0], [0.0, 0.0]])  # 4 nonzeros
    torch.testing.assert_close(compiled(passing), _checked_nonzero(passing))
    failing = torch.tensor([[1.0, 0.0], [2.0, 3.0], [0.0, 4.0], [5.0, 6.0]])  # 6 nonzeros
    with pytest.raises(RuntimeError):
        _checked_nonzero(failing)
    with pytest.raises(RuntimeError):
        compiled(failing)
