"""inductor_lite's Triton code generator on ``torch.cond`` and data-dependent sizes.

The same programs as tests/test_inductor_runtime_values.py (which covers the C++ generator),
compiled with ``codegen="triton"`` and ``fallback="raise"``: on CUDA tensors when a GPU is
present, else on CPU tensors through Triton's interpreter (TRITON_INTERPRET=1, as
packages/inductor_lite/tests/test_triton.py runs it). Each branch of a cond is a graph of
Triton kernels chosen by the wrapper at run time; an unbacked size (a mask's count, an
``item()``) is a kernel argument the wrapper binds from the aten call that makes it. Values
and gradients are compared with eager and with torch.compile (aot_eager) on inputs that take
each branch and select none, one or several elements.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import torch

# the interpreter must be chosen before triton is first imported (its standard library is
# bound to interpreted or compiled form at import): the root conftest.py does that for pytest
if not torch.cuda.is_available():
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("triton was imported without its interpreter and there is no GPU",
                    allow_module_level=True)
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

import compile_api  # noqa: E402
import inductor_lite  # noqa: E402
import inductor_lite.compile as inductor_compile  # noqa: E402

from .test_inductor_runtime_values import (  # noqa: E402
    CONDS,
    LEVELS,
    SYMBOLIC_PREDICATES,
    W,
    _torch_compiled,
    count_nonzero_rows,
    masked_head,
    masked_values,
    scale_by_item,
    sliced_by_item,
    symbolic_bool_inputs,
    train_on_symbolic_predicates,
    unique_sum,
)

DEV = "cuda" if torch.cuda.is_available() else "cpu"
TRITON = inductor_lite.InductorConfig(codegen="triton", fallback="raise")


def triton_inductor(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
    """inductor_lite's Triton generator, raising instead of running a graph eagerly."""
    return inductor_lite.compile_fx(gm, example_inputs, config=TRITON)


@pytest.fixture
def compiled_graphs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every CompiledGraph built (top-level graphs and cond branches); each must have run
    its Triton kernels on every call."""
    compile_api.config.suppress_errors = False
    made: list[Any] = []
    real = inductor_compile._compile

    def recording(*args: Any, **kwargs: Any) -> Any:
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(inductor_compile, "_compile", recording)
    yield made
    for graph in made:
        assert graph.eager_calls == 0, graph.wrapper_source
    assert all("@triton.jit" in graph.kernel_source for graph in made if graph.kernel_count)


def _run(fn: Callable[[torch.Tensor], torch.Tensor], level: float) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    x = (level + 0.05 * torch.rand(5, generator=gen)).to(DEV).requires_grad_(True)
    out = fn(x)
    grads = torch.autograd.grad(out.sum(), (x, W), materialize_grads=True)
    return [out.detach(), *grads]


@pytest.mark.skipif(DEV != "cpu", reason="the branch programs read a CPU weight")
@pytest.mark.parametrize("name", ["cond_global", "cond_nested"])
def test_cond_trains_through_triton_kernels_with_eager_values_and_gradients(
    name: str, compiled_graphs: list[Any]
) -> None:
    fn = CONDS[name]
    ours = compile_api.compile(fn, fullgraph=True, backend=triton_inductor)
    theirs = _torch_compiled(fn)
    for level in LEVELS:
        want = _run(fn, level)
        torch.testing.assert_close(_run(ours, level), want)
        torch.testing.assert_close(_run(theirs, level), want)
    torch._dynamo.reset()
    # forward and backward graphs, and two compiled branches per cond in each
    assert len(compiled_graphs) >= 6
    assert sum(g.kernel_count for g in compiled_graphs) >= 4


@pytest.mark.parametrize("name", sorted(SYMBOLIC_PREDICATES))
def test_cond_on_a_symbolic_bool_trains_through_triton_kernels(
    name: str, compiled_graphs: list[Any]
) -> None:
    # the backward takes the forward's predicate (a size comparison, a bool item()) as a
    # SymBool graph input, bound by the wrapper and handed to the branch choice
    fn, dynamic, capture = SYMBOLIC_PREDICATES[name]
    compile_api.config.capture_scalar_outputs = capture
    ours = compile_api.compile(fn, fullgraph=True, dynamic=dynamic, backend=triton_inductor)
    train_on_symbolic_predicates(fn, ours, capture, DEV)
    assert symbolic_bool_inputs(compiled_graphs) >= 1
    assert sum(g.kernel_count for g in compiled_graphs) >= 4


DATA_DEPENDENT = [
    masked_values,
    masked_head,
    count_nonzero_rows,
    scale_by_item,
    sliced_by_item,
    unique_sum,
]
# none, one and several elements above 0
INPUTS = (
    torch.linspace(-2.0, -0.5, 12).reshape(3, 4),
    torch.linspace(-2.0, 0.1, 12).reshape(3, 4),
    torch.linspace(-1.0, 2.0, 12).reshape(3, 4),
)


@pytest.mark.parametrize("fn", DATA_DEPENDENT, ids=[f.__name__ for f in DATA_DEPENDENT])
def test_data_dependent_sizes_run_triton_kernels_with_eager_values(
    fn: Callable[..., Any], compiled_graphs: list[Any]
) -> None:
    compile_api.config.capture_scalar_outputs = True
    compile_api.config.capture_dynamic_output_shape_ops = True
    ours = compile_api.compile(fn, backend=triton_inductor)
    theirs = _torch_compiled(
        fn, capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True
    )
    for x in INPUTS:
        x = x.to(DEV)
        want = fn(x)
        torch.testing.assert_close(ours(x), want)
        torch.testing.assert_close(theirs(x), want)
    torch._dynamo.reset()
    assert compiled_graphs and all(g.kernel_count for g in compiled_graphs)


def test_masked_values_train_through_triton_kernels_with_eager_gradients(
    compiled_graphs: list[Any],
) -> None:
    # the backward graph's inputs are sized by the mask's count (an unbacked size)
    ours = compile_api.compile(masked_values, fullgraph=True, backend=triton_inductor)
    for x in INPUTS:
        x = x.to(DEV).requires_grad_(True)
        got = ours(x)
        want = masked_values(x)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(
            torch.autograd.grad(got.sum(), x), torch.autograd.grad(want.sum(), x)
        )
    assert len(compiled_graphs) >= 2  # forward and backward
