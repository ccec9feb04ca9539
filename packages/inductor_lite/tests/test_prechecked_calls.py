"""A graph called by aot's runtime through ``call_prechecked`` (aot checked the inputs) skips its
own per-call check only after a first call has passed it; results stay eager's whatever the
inputs' layout, and a direct call still checks."""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

import aot
from inductor_lite import CompiledGraph, compile_aten_graph


def _f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x * w + 1.0).sum(dim=1)


def _compiled_through_aot() -> tuple[Any, list[Any]]:
    graphs: list[Any] = []

    def compiler(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(compile_aten_graph(gm, example_inputs))
        return graphs[-1]

    return aot.aot_function(_f, compiler), graphs


def test_aot_forward_graph_trusts_aot_after_its_first_call_and_matches_eager() -> None:
    compiled, graphs = _compiled_through_aot()
    x, w = torch.randn(8, 16), torch.randn(8, 16)
    layouts = [x, torch.randn(16, 8).t(), x.double(), torch.randn(16).expand(8, 16), x]
    with torch.no_grad():
        for a in layouts:
            b = w.to(a.dtype)
            torch.testing.assert_close(compiled(a, b), _f(a, b), rtol=1e-5, atol=1e-5)
    assert all(isinstance(g, CompiledGraph) for g in graphs)
    assert all(g.launched and g.eager_calls == 0 for g in graphs)
    assert len(graphs) == 4  # one per layout; the last call is the first's signature again


def test_training_matches_eager_through_the_prechecked_forward() -> None:
    compiled, graphs = _compiled_through_aot()
    for _ in range(2):
        x, w = torch.randn(8, 16), torch.randn(8, 16, requires_grad=True)
        compiled(x, w).sum().backward()
        w_ref = w.detach().clone().requires_grad_()
        _f(x, w_ref).sum().backward()
        assert w.grad is not None and w_ref.grad is not None
        torch.testing.assert_close(w.grad, w_ref.grad, rtol=1e-5, atol=1e-5)
    assert len(graphs) == 2 and all(g.launched and g.eager_calls == 0 for g in graphs)


def _compiled_alone() -> CompiledGraph:
    from torch.fx.experimental.proxy_tensor import make_fx

    x, w = torch.randn(8, 16), torch.randn(8, 16)
    cg = compile_aten_graph(make_fx(_f)(x, w), [x, w])
    assert isinstance(cg, CompiledGraph)
    return cg


def test_a_wrong_promise_on_the_first_prechecked_call_runs_eagerly() -> None:
    """Were a caller's example inputs ever not the inputs' layout, the first call shows it: the
    input is copied into the compiled layout, and that call does not prove the caller's."""
    cg = _compiled_alone()
    x, w, xt = torch.randn(8, 16), torch.randn(8, 16), torch.randn(16, 8).t()
    torch.testing.assert_close(cg.call_prechecked(xt, w), _f(xt, w), rtol=1e-5, atol=1e-5)
    assert not cg.launched
    torch.testing.assert_close(cg.call_prechecked(xt, w), _f(xt, w), rtol=1e-5, atol=1e-5)
    assert cg.eager_calls == 0 and not cg.launched
    torch.testing.assert_close(cg.call_prechecked(x, w), _f(x, w), rtol=1e-5, atol=1e-5)
    assert cg.launched


def test_a_direct_call_after_prechecked_calls_still_checks() -> None:
    cg = _compiled_alone()
    x, w = torch.randn(8, 16), torch.randn(8, 16)
    cg.call_prechecked(x, w)
    cg.call_prechecked(x, w)
    x9 = torch.randn(9, 16)
    w9 = torch.randn(9, 16)
    torch.testing.assert_close(cg(x9, w9), _f(x9, w9), rtol=1e-5, atol=1e-5)
    assert cg.eager_calls == 1


def _scaled(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x * 2.0 - 1.0)


def test_strides_of_one_element_dims_do_not_send_the_graph_to_eager() -> None:
    """A (N, C, 1, 1) input whose strides differ from the example's only on its dims of one
    element (a pooled channels-last activation saved for the backward) runs the compiled code
    as it is: such a dim addresses nothing beyond element 0. A stride that differs elsewhere
    is another layout: the input is copied into the compiled one."""
    from torch.fx.experimental.proxy_tensor import make_fx

    x = torch.randn(2, 8, 1, 1)  # strides (8, 1, 1, 1)
    cg = compile_aten_graph(make_fx(_scaled)(x), [x])
    assert isinstance(cg, CompiledGraph)
    pooled = torch.randn(2, 8, 1, 1).as_strided((2, 8, 1, 1), (8, 1, 8, 8))  # as aten gave
    assert pooled.stride() != x.stride()
    for a in (x, pooled):
        torch.testing.assert_close(cg(a), _scaled(a))
    assert cg.eager_calls == 0
    swapped = torch.randn(8, 2, 1, 1).transpose(0, 1)  # strides (1, 2, 1, 1): another layout
    torch.testing.assert_close(cg(swapped), _scaled(swapped))
    assert cg.eager_calls == 0


def test_an_input_in_another_dense_layout_is_copied_into_the_compiled_one() -> None:
    """A read-only input whose strides differ from the example's (a backward's saved half of a
    wider buffer, handed over contiguous) is copied into the compiled layout, not run eagerly."""
    from torch.fx.experimental.proxy_tensor import make_fx

    half = torch.randn(32, 128)[:, :64]  # strides (128, 1)
    cg = compile_aten_graph(make_fx(_scaled)(half), [half])
    assert isinstance(cg, CompiledGraph)
    for a in (half, torch.randn(32, 64), torch.randn(64, 32).t()):
        torch.testing.assert_close(cg(a), _scaled(a))
    assert cg.eager_calls == 0


def test_a_tensor_on_another_device_fails_the_check_of_a_cpu_graph() -> None:
    cg = _compiled_alone()
    x, w = torch.randn(8, 16), torch.randn(8, 16)
    assert cg.input_check is not None
    assert cg.input_check([x, w])
    # same dtype, sizes and strides, not on the CPU: the kernels must not read it
    assert not cg.input_check([x.to("meta"), w])
    assert not cg.input_check([x, w.to("meta")])


def _counting_checks(cg: CompiledGraph) -> list[int]:
    """Replace ``cg``'s input check with one that counts its runs."""
    count = [0]
    check = cg.input_check
    assert check is not None

    def counted(args: Any) -> bool:
        count[0] += 1
        return check(args)

    cg.input_check = counted
    return count


def _step_matches_eager(compiled: Any) -> None:
    x, w = torch.randn(8, 16), torch.randn(8, 16, requires_grad=True)
    compiled(x, w).square().sum().backward()
    w_ref = w.detach().clone().requires_grad_()
    _f(x, w_ref).square().sum().backward()
    assert w.grad is not None and w_ref.grad is not None
    # the backward reads the forward's saved values: float32 rounding of a sum of 16 products
    torch.testing.assert_close(w.grad, w_ref.grad, rtol=1e-4, atol=1e-4)


def test_backward_checks_saved_values_of_compiled_forwards_until_one_passes() -> None:
    compiled, graphs = _compiled_through_aot()
    _step_matches_eager(compiled)
    forward, backward = graphs
    assert isinstance(backward, CompiledGraph) and backward.vouched
    checks = _counting_checks(backward)
    for _ in range(3):
        _step_matches_eager(compiled)
    assert checks[0] == 0  # the first backward proved the layout every compiled forward gives
    assert forward.eager_calls == 0 and backward.eager_calls == 0


def test_backward_after_a_forward_run_eagerly_checks_its_inputs() -> None:
    compiled, graphs = _compiled_through_aot()
    _step_matches_eager(compiled)
    forward, backward = graphs
    checks = _counting_checks(backward)
    forward.broken = True  # the forward now runs as it came: its saved values are eager's
    _step_matches_eager(compiled)
    assert forward.eager_calls == 1
    assert checks[0] == 1
