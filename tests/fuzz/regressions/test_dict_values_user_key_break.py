"""Found while writing the fault-injection tests (2026-11-22 00:59, symbolic_vm at ae8cfb6): a loop
over ``d.values()`` of a dict with a user-object key graph-breaks at GET_ITER, and compiling the
resume function failed (ResumeError: duplicate live local names); with suppress_errors=True the
transformed resume code was re-captured recursively until RecursionError (about 35 s) before
running eagerly. Fixed by symbolic_vm 6426cd1 (a break inside a resume function resumes from the
original code).
"""

from __future__ import annotations

import torch

import compile_api


class _Key:
    pass


def _sum_values(x: torch.Tensor, d: dict[object, float]) -> torch.Tensor:
    total = x
    for value in d.values():
        total = total + value
    return total


def test_loop_over_dict_values_with_user_key_compiles_without_internal_error() -> None:
    compile_api.config.suppress_errors = False
    compiled = compile_api.compile(_sum_values, backend="eager")
    x = torch.arange(3.0)
    d = {_Key(): 1.0, "b": 2.0}
    assert torch.equal(compiled(x, d), _sum_values(x, d))
