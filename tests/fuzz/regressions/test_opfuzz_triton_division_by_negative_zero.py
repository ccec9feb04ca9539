"""Op fuzz find (session 13, seed 4 program 778): on inductor_lite's Triton path ``x / -0.0``
had the sign of ``x / 0.0`` (-inf where eager gives inf), under Triton's interpreter and on an
H200 alike; the C++ path matched eager. Triton makes a ``-0.0`` constant (a literal, or a
negated zero) +0.0; the code generator now writes a negative zero as its sign bit bitcast to the
float type. On a GPU machine the runner's Triton share is declined (its inputs are CPU
tensors), so there the second test compiles the same division for CUDA tensors.
"""

# ruff: noqa: E501
from __future__ import annotations

import pytest
import torch

from tests.fuzz.op_runner import TRITON_SHARE_RUNS, check_op_source

SOURCE = """\
import torch

SEED = 40007780
INPUTS = [((3, 5), 'float64', 'contig', 'normal')]
REQUIRES_GRAD = ()
CODEGEN = 'triton'


def fn(a0):
    return (torch.div(a0, -0.0),)
"""


@pytest.mark.skipif(not TRITON_SHARE_RUNS, reason="Triton's interpreter is off (a GPU machine)")
def test_triton_division_by_negative_zero_matches_eager() -> None:
    failure = check_op_source(SOURCE, yardstick=False)
    assert failure is None, str(failure)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_triton_division_by_negative_zero_on_the_gpu_matches_eager() -> None:
    import compile_api
    from inductor_lite import InductorConfig, compile_fx

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> object:
        config = InductorConfig(fallback="raise", codegen="triton")
        return compile_fx(gm, list(example_inputs), config=config)

    def fn(a: torch.Tensor) -> torch.Tensor:
        return torch.div(a, -0.0)

    compile_api.reset()
    a = torch.tensor([[1.0, -2.0, 0.0, float("inf")], [-0.0, 3.5, -1e-30, float("nan")]])
    a = a.to(device="cuda", dtype=torch.float64)
    got = compile_api.compile(fn, backend=backend)(a)
    want = fn(a)
    torch.testing.assert_close(got, want, equal_nan=True)  # inf against -inf fails
