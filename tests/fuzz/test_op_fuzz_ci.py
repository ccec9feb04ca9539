"""The op family's fixed-seed CI slice (inductor_lite vs eager) and its runner's own checks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.fuzz.campaign import program_seed
from tests.fuzz.op_campaign import run_op_campaign
from tests.fuzz.op_families import OP_KINDS, generate_op_program
from tests.fuzz.op_runner import check_op_source, eager_problem

OP_CI_SEED = 2027
OP_CI_PROGRAMS = 24
OP_CI_BLOCK = 12

SIMPLE = (
    "import torch\n\nSEED = 3\nINPUTS = [((4, 5), 'float32', 'contig', 'normal'), "
    "((5,), 'float32', 'strided', 'normal')]\nREQUIRES_GRAD = (0,)\nCODEGEN = 'cpp'\n\n\n"
    "def fn(a0, a1):\n    v0 = torch.sin(a0) * a1 + a0.sum(1, keepdim=True)\n"
    "    return (v0, v0.mean(0))\n"
)


def _wrapping(change: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., Any]:
    def backend(inner: Callable[..., Any]) -> Callable[..., Any]:
        def compile_(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
            compiled = inner(gm, example_inputs)

            def run(*args: Any) -> Any:
                out = compiled(*args)
                return [
                    change(o) if isinstance(o, torch.Tensor) and o.is_floating_point() else o
                    for o in out
                ]

            return run

        return compile_

    return backend


def _one_nan(t: torch.Tensor) -> torch.Tensor:
    return t.flatten().index_fill(0, torch.tensor([0]), float("nan")).reshape(t.shape)


def test_op_programs_run_eagerly_without_errors() -> None:
    # the generator's promise: a difference is the compiler's, never the program's
    for index in range(30):
        assert eager_problem(generate_op_program(program_seed(OP_CI_SEED, index)).source) is None


@pytest.mark.parametrize("kind", sorted(OP_KINDS))
def test_every_op_kind_generates_valid_programs(kind: str) -> None:
    for index in range(3):
        program = generate_op_program(index, kinds=[kind])
        assert kind in program.kinds, program.source
        assert eager_problem(program.source) is None


def test_op_runner_reports_a_wrong_value_and_passes_rounding_noise() -> None:
    assert check_op_source(SIMPLE) is None
    wrong = check_op_source(SIMPLE, yardstick=False, backend=_wrapping(lambda t: t + 1e-3))
    assert wrong is not None and wrong.kind in {"value", "grad"}, wrong
    # one float32 ulp or so is rounding: it must never fail a program
    noise = check_op_source(SIMPLE, yardstick=False, backend=_wrapping(lambda t: t * (1 + 2e-7)))
    assert noise is None, noise
    nan = check_op_source(SIMPLE, yardstick=False, backend=_wrapping(_one_nan))
    assert nan is not None and "NaN" in nan.detail, nan


@pytest.mark.parametrize(
    "first",
    range(0, OP_CI_PROGRAMS, OP_CI_BLOCK),
    ids=lambda f: f"programs_{f}_to_{f + OP_CI_BLOCK - 1}",
)
def test_op_ci_slice_compiled_matches_eager(first: int) -> None:
    summary = run_op_campaign(
        seed=OP_CI_SEED, first=first, programs=OP_CI_BLOCK, shrink_failures=False
    )
    assert summary["programs"] == OP_CI_BLOCK
    # every program that was not declined (op_runner.DECLINED, or the Triton share on a GPU
    # machine) compiled at least one graph
    assert summary["graphs_compiled"] >= OP_CI_BLOCK - summary["declined"]
    assert summary["declined"] <= OP_CI_BLOCK // 4
    assert summary["failures"] == [], "\n\n".join(
        f"{f['failure']}\n{f.get('source', '')}" for f in summary["failures"]
    )
