"""``torch._check`` on a data-dependent size inside a ``torch.cond`` branch holds when the graph
runs (PyTorch's test_misc::test_cond_runtime_assert_generation): it is traced as
``expect_true``, which on real values returns False instead of raising, and the ShapeEnv's
deferred assertions are inserted in the outer graph only, so a failing check returned a value
where eager and torch.compile raise."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch._dynamo

import compile_api


def _length_multiple_of_four(x: torch.Tensor) -> torch.Tensor:
    nonzero = x.nonzero()
    torch._check(nonzero.shape[0] % 4 == 0)
    return torch.zeros(nonzero.shape[0])


def checked_in_both_branches(x: torch.Tensor) -> torch.Tensor:
    return torch.cond(
        x.shape[0] % 4 == 0,
        lambda: _length_multiple_of_four(x),
        lambda: _length_multiple_of_four(x),
    )


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_a_failing_check_in_a_cond_branch_raises_as_eager(backend: str) -> None:
    compile_api.config.capture_scalar_outputs = True
    compile_api.config.capture_dynamic_output_shape_ops = True
    compiled = compile_api.compile(checked_in_both_branches, dynamic=True, backend=backend)
    passing = torch.ones(4, 4)
    with warnings.catch_warnings():
        # inductor_lite runs cond branches of unbacked sizes eagerly, with a warning
        warnings.simplefilter("ignore")
        torch.testing.assert_close(compiled(passing), checked_in_both_branches(passing))
        failing = torch.ones(5, 5)  # 25 nonzero: both branches' check fails
        with pytest.raises(RuntimeError):
            checked_in_both_branches(failing)
        with pytest.raises(RuntimeError, match="Runtime assertion failed"):
            compiled(failing)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(
        capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True
    ):
        theirs = torch.compile(checked_in_both_branches, dynamic=True, backend="aot_eager")
        theirs(passing)
        with pytest.raises(RuntimeError, match="Runtime assertion failed"):
            theirs(failing)
