"""torch's tracing errors (data-dependent guards, ops without fake kernels, failing backends) and
Strata's own bugs never escape a compile raw.

Outside ``fullgraph=True`` each falls back (a graph break at the instruction, or the frame or
graph eagerly) with eager's result; under ``fullgraph=True`` each is a compile_api error that
names the user's file:line (an internal error also says it is a bug of Strata's, never hidden by
running the frame eagerly). torch.compile is run on the same code where it compiles it.
"""

from __future__ import annotations

import dis
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import sympy
import torch
import torch._dynamo
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

import compile_api
import symbolic_vm
from symbolic_vm.interpreter import handlers_for

from .conftest import GraphCounter


def zero_from_a_tensor_bound(lengths: torch.Tensor, out: torch.Tensor) -> tuple[torch.Tensor]:
    start = lengths[3]
    out[(3, slice(start, None, None))] = 0  # PyTorch's test_slicing_dynamic_shape_setitem
    return (out,)


def _slice_args() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([0, 4, 1, 2, 7, 0]), torch.arange(60.0).reshape(6, 10)


def test_slice_with_a_tensor_bound_stored_into_runs_as_eager() -> None:
    """The slice built from a traced element was a constant holding a fake tensor, which the
    transformed code then used: GuardOnDataDependentSymNode reached the user."""
    expected = zero_from_a_tensor_bound(*_slice_args())
    counter = GraphCounter()
    ours = compile_api.compile(zero_from_a_tensor_bound, backend=counter)(*_slice_args())
    assert torch.equal(ours[0], expected[0])
    again = compile_api.compile(zero_from_a_tensor_bound, backend="aot_eager")
    compile_api.reset()
    assert torch.equal(again(*_slice_args())[0], expected[0])
    torch._dynamo.reset()
    theirs = torch.compile(zero_from_a_tensor_bound, backend="aot_eager")(*_slice_args())
    assert torch.equal(theirs[0], expected[0])


def test_slice_with_a_tensor_bound_under_fullgraph_is_one_graph_like_torch() -> None:
    """Under fullgraph=True the bound is read with item() when the indexing runs (an unbacked
    symbol), as torch.compile does: one graph, eager's values."""
    counter = GraphCounter()
    fn = compile_api.compile(zero_from_a_tensor_bound, backend=counter, fullgraph=True)
    assert torch.equal(fn(*_slice_args())[0], zero_from_a_tensor_bound(*_slice_args())[0])
    assert counter.count == 1
    torch._dynamo.reset()
    theirs = torch.compile(zero_from_a_tensor_bound, backend="aot_eager", fullgraph=True)
    assert torch.equal(theirs(*_slice_args())[0], zero_from_a_tensor_bound(*_slice_args())[0])


def slices_by_tensor_bounds(t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    x[1, t:] = 0
    return x[t:] * 2 + x[:, slice(None, t)].sum()


@pytest.mark.parametrize("capture", [False, True])
@pytest.mark.parametrize("fullgraph", [False, True])
def test_tensor_slice_bounds_give_eager_results(capture: bool, fullgraph: bool) -> None:
    compile_api.config.capture_scalar_outputs = capture
    fn = compile_api.compile(slices_by_tensor_bounds, backend="aot_eager", fullgraph=fullgraph)
    x = torch.arange(12.0).reshape(3, 4)
    expected = slices_by_tensor_bounds(torch.tensor(1), x.clone())
    assert torch.equal(fn(torch.tensor(1), x.clone()), expected)


def repeat_by_item(x: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    n = count.item()
    return x * len([0] * n)


def test_data_dependent_list_length_breaks_or_names_the_line_under_fullgraph() -> None:
    compile_api.config.capture_scalar_outputs = True
    args = (torch.ones(3), torch.tensor(2))
    expected = repeat_by_item(*args)
    assert torch.equal(compile_api.compile(repeat_by_item, backend="eager")(*args), expected)
    compile_api.reset()
    with pytest.raises(compile_api.Unsupported) as caught:
        compile_api.compile(repeat_by_item, backend="eager", fullgraph=True)(*args)
    text = str(caught.value)
    assert "data-dependent" in text and f"{__file__}:" in text
    assert "return x * len([0] * n)" in text


@torch.library.custom_op("strata_tests::no_fake_kernel", mutates_args=())
def no_fake_kernel(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def calls_an_op_without_fake_kernel(x: torch.Tensor) -> torch.Tensor:
    return no_fake_kernel(x + 1) - 1


def test_op_without_fake_kernel_runs_eagerly_and_fullgraph_names_it() -> None:
    x = torch.arange(4.0)
    ours = compile_api.compile(calls_an_op_without_fake_kernel, backend="aot_eager")(x)
    assert torch.equal(ours, calls_an_op_without_fake_kernel(x))
    compile_api.reset()
    with pytest.raises(compile_api.Unsupported) as caught:
        compile_api.compile(calls_an_op_without_fake_kernel, backend="eager", fullgraph=True)(x)
    text = str(caught.value)
    assert "no_fake_kernel" in text and f"{__file__}:" in text
    torch._dynamo.reset()  # torch.compile 2.13 raises, even without fullgraph
    with pytest.raises(Exception, match="fake"):
        torch.compile(calls_an_op_without_fake_kernel, backend="aot_eager")(x)


# ---- a backend that fails ---------------------------------------------------------------------


def _failing_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
    raise RuntimeError("injected backend failure")


def sine_plus_one(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) + 1


def test_failing_backend_runs_the_graph_eagerly_but_fullgraph_raises() -> None:
    x = torch.linspace(-1, 1, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = compile_api.compile(sine_plus_one, backend=_failing_backend)(x)
    assert torch.equal(ours, sine_plus_one(x))
    compile_api.reset()
    with pytest.raises(compile_api.BackendCompilerFailed, match="injected backend failure"):
        compile_api.compile(sine_plus_one, backend=_failing_backend, fullgraph=True)(x)


# ---- faults injected into one instruction of the VM ---------------------------------------


def subtract_then_scale(x: torch.Tensor) -> torch.Tensor:
    y = torch.cos(x)
    z = y - 1  # the injected fault's instruction
    return z * 3


@pytest.fixture
def inject_at_subtraction(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Exception], None]]:
    """Make the VM's handler of ``y - 1`` in subtract_then_scale raise a given error."""
    table = handlers_for(sys.version_info[:2])
    name = "BINARY_OP" if "BINARY_OP" in table else "BINARY_SUBTRACT"
    real = table[name]

    def arm(error: Exception) -> None:
        def faulty(vm: Any, inst: dis.Instruction) -> None:
            if vm.code is subtract_then_scale.__code__ and "-" in inst.argrepr:
                raise error
            real(vm, inst)

        monkeypatch.setitem(table, name, faulty)

    yield arm


def test_torch_data_dependent_error_in_the_vm_is_a_graph_break(
    inject_at_subtraction: Callable[[Exception], None],
) -> None:
    inject_at_subtraction(GuardOnDataDependentSymNode(sympy.Symbol("u0"), "injected guard"))
    x = torch.linspace(-1, 1, 5)
    counter = GraphCounter()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a break, not a frame given up with a warning
        ours = compile_api.compile(subtract_then_scale, backend=counter)(x)
    assert torch.equal(ours, subtract_then_scale(x))
    assert counter.count >= 1  # torch.cos before the break is compiled
    compile_api.reset()
    with pytest.raises(compile_api.Unsupported) as caught:
        compile_api.compile(subtract_then_scale, backend="eager", fullgraph=True)(x)
    text = str(caught.value)
    assert "data-dependent" in text and "z = y - 1" in text and f"{__file__}:" in text


def test_internal_error_runs_eagerly_outside_fullgraph_and_raises_under_it(
    inject_at_subtraction: Callable[[Exception], None],
) -> None:
    inject_at_subtraction(TypeError("injected internal bug"))
    x = torch.linspace(-1, 1, 5)
    with pytest.warns(RuntimeWarning, match="injected internal bug"):
        ours = compile_api.compile(subtract_then_scale, backend="eager")(x)
    assert torch.equal(ours, subtract_then_scale(x))
    compile_api.reset()
    assert compile_api.config.suppress_errors  # the default: still never eager under fullgraph
    compiled = compile_api.compile(subtract_then_scale, backend="eager", fullgraph=True)
    with pytest.raises(compile_api.InternalError) as caught:
        compiled(x)
    text = str(caught.value)
    assert "bug in Strata" in text and "injected internal bug" in text
    line = subtract_then_scale.__code__.co_firstlineno + 2
    assert f"{__file__}:{line}" in text and "z = y - 1" in text
    assert symbolic_vm.traced_at(caught.value.cause)[0] == (__file__, line)


def test_internal_error_outside_the_capture_is_named_a_strata_bug_under_fullgraph(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from compile_api import frame_compiler

    def broken(f_locals: dict[str, Any]) -> Any:
        raise KeyError("injected bookkeeping bug")

    monkeypatch.setattr(frame_compiler, "_static_dims", broken)
    x = torch.linspace(-1, 1, 5)
    with pytest.warns(RuntimeWarning, match="injected bookkeeping bug"):
        ours = compile_api.compile(sine_plus_one, backend="eager")(x)
    assert torch.equal(ours, sine_plus_one(x))
    compile_api.reset()
    with pytest.raises(compile_api.InternalError, match="bug in Strata") as caught:
        compile_api.compile(sine_plus_one, backend="eager", fullgraph=True)(x)
    assert "sine_plus_one" in str(caught.value) and __file__ in str(caught.value)
