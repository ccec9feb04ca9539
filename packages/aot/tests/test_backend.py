"""aot as the body of a backend: aot_module_simplified under the real torch.compile (as oracle
harness only: the implementation never calls torch.compile) and on fx.symbolic_trace graphs."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

import aot


def _identity_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    return aot.aot_module_simplified(gm, example_inputs, aot.identity_compiler)


BACKENDS = {
    "simplified_identity": _identity_backend,
    "aot_eager": aot.aot_eager,
    "aot_eager_decomp_partition": aot.aot_eager_decomp_partition,
}


@pytest.fixture(autouse=True)
def _reset_dynamo() -> Any:
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("model_name", ["mlp", "transformer_block", "cnn_batchnorm_dropout"])
def test_torch_compile_with_aot_backend_trains_like_eager(
    helpers: Any, model_name: str, backend: str
) -> None:
    make_model, make_input = helpers.MODELS[model_name]
    used: list[int] = []

    def counting_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        used.append(1)
        return BACKENDS[backend](gm, example_inputs)

    helpers.compare_training(
        make_model, make_input, lambda m: torch.compile(m, backend=counting_backend)
    )
    assert used, "torch.compile never called the aot backend"


def test_torch_compile_function_with_mutation_and_views(helpers: Any) -> None:
    def fn(x: torch.Tensor, buf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        buf.mul_(2)
        y = (x * buf).sin()
        return y.sum(), y.view(-1)

    compiled = torch.compile(fn, backend=_identity_backend)
    x = torch.randn(2, 3, requires_grad=True)
    b_eager, b_compiled = torch.ones(2, 3), torch.ones(2, 3)
    expected, actual = fn(x, b_eager), compiled(x, b_compiled)
    helpers.assert_close(actual, expected, "outputs")
    helpers.assert_close(b_compiled, b_eager, "mutated buffer")
    ge = torch.autograd.grad(expected[0] + expected[1].pow(2).sum(), x)
    gc = torch.autograd.grad(actual[0] + actual[1].pow(2).sum(), x)
    helpers.assert_close(gc, ge, "grad")


def test_aot_module_simplified_on_a_symbolic_trace_graph_with_parameters(helpers: Any) -> None:
    torch.manual_seed(0)
    model = helpers.MLP()
    gm = torch.fx.symbolic_trace(copy.deepcopy(model))
    x = torch.randn(5, 16)
    run = aot.aot_module_simplified(gm, [x], aot.identity_compiler,
                                    partition_fn=aot.min_cut_partition)
    out = run(x)
    expected = model(x)
    helpers.assert_close(out, expected, "output")
    grads = torch.autograd.grad(out.sum(), list(gm.parameters()))
    expected_grads = torch.autograd.grad(expected.sum(), list(model.parameters()))
    helpers.assert_close(grads, expected_grads, "parameter grads")


def test_aot_module_simplified_returns_what_the_graph_returns(helpers: Any) -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (x + y, (x * y).sum())

    gm = torch.fx.symbolic_trace(fn)
    x, y = torch.randn(3, requires_grad=True), torch.randn(3)
    run = aot.aot_module_simplified(gm, [x, y], aot.identity_compiler)
    out = run(x, y)
    assert isinstance(out, tuple) and len(out) == 2
    helpers.assert_close(out, fn(x, y), "outputs")
    single = aot.aot_module_simplified(torch.fx.symbolic_trace(lambda a: a.cos()), [x],
                                       aot.identity_compiler)
    assert isinstance(single(x), torch.Tensor)


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_dynamic_shapes_compile_once_and_match_eager_for_each_size(
    helpers: Any, backend: str
) -> None:
    def fn(x: torch.Tensor, w: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.tanh(x @ w) * x.shape[0]
        return h.sum(0) * n, x.view(-1)

    compiles: list[int] = []

    def counting(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        compiles.append(1)
        return BACKENDS[backend](gm, example_inputs)

    compiled = torch.compile(fn, backend=counting, dynamic=True)
    w = torch.randn(4, 3, requires_grad=True)
    # Sizes unlike w's (4, 3): dynamo would otherwise tie them to w's by duck sizing.
    for rows, n in ((5, 2), (6, 5), (9, 7)):
        x = torch.randn(rows, 4, requires_grad=True)
        actual, expected = compiled(x, w, n), fn(x, w, n)
        helpers.assert_close(actual, expected, f"outputs for {rows} rows")
        assert actual[1]._base is x
        grads = torch.autograd.grad(actual[0].sum(), [x, w])
        helpers.assert_close(grads, torch.autograd.grad(expected[0].sum(), [x, w]), "grads")
    assert len(compiles) == 1


def test_dynamic_output_views_with_symbolic_sizes_are_rebuilt_per_call(helpers: Any) -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y = torch.tanh(x @ w)
        return x.view(x.shape[0] * 2, -1), y[: x.shape[0] // 2], y.sum()

    compiles: list[int] = []

    def counting(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        compiles.append(1)
        return _identity_backend(gm, example_inputs)

    compiled = torch.compile(fn, backend=counting, dynamic=True)
    w = torch.randn(6, 5, requires_grad=True)
    for rows in (4, 8, 10):
        x = torch.randn(rows, 6, requires_grad=True)
        actual, expected = compiled(x, w), fn(x, w)
        for a, e in zip(actual, expected):
            assert a.shape == e.shape and a.stride() == e.stride()
            helpers.assert_close(a, e, f"outputs for {rows} rows")
        assert actual[0]._base is x and actual[1]._base is not None
        loss_a = actual[0].sum() + actual[1].pow(2).sum() + actual[2]
        loss_e = expected[0].sum() + expected[1].pow(2).sum() + expected[2]
        helpers.assert_close(torch.autograd.grad(loss_a, [x, w]),
                             torch.autograd.grad(loss_e, [x, w]), "grads")
    assert len(compiles) == 1  # one symbolic compile served every size


def test_symbolic_placeholders_with_real_example_inputs_compile_once(helpers: Any) -> None:
    """A capture layer may pass real example values while the graph's placeholders carry the
    symbolic ones: aot must trace symbolically and serve every size with one compile."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.tanh(x @ w) * x.shape[0]).sum(0), x.view(x.shape[0] * 2, -1)

    w = torch.randn(4, 3, requires_grad=True)
    gm = make_fx(fn, tracing_mode="symbolic")(torch.randn(6, 4), w)
    run = aot.aot_module_simplified(gm, [torch.randn(6, 4, requires_grad=True), w],
                                    aot.identity_compiler)
    for rows in (6, 8, 10):
        x = torch.randn(rows, 4, requires_grad=True)
        actual, expected = run(x, w), fn(x, w)
        helpers.assert_close(actual, expected, f"outputs for {rows} rows")
        assert actual[1]._base is x
        helpers.assert_close(torch.autograd.grad(actual[0].sum(), [x, w]),
                             torch.autograd.grad(expected[0].sum(), [x, w]), "grads")
    assert len(run.aot_function.cache) == 1
    # A new signature (grad mode off) compiles once more, symbolically again: every size works.
    with torch.no_grad():
        for rows in (7, 9):
            x = torch.randn(rows, 4)
            helpers.assert_close(run(x, w), fn(x, w), f"no_grad outputs for {rows} rows")
    assert len(run.aot_function.cache) == 2


def test_a_later_signature_that_fails_to_compile_runs_the_graph_with_a_warning() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).sin()

    gm = torch.fx.symbolic_trace(f)

    def no_training(joint: Any, inputs: Any, *, num_fwd_outputs: int) -> Any:
        raise RuntimeError("partitioner bug")

    with torch.no_grad():  # the first compile (inference) needs no partition
        run = aot.aot_module_simplified(gm, [torch.randn(3)], aot.eager_compiler,
                                        partition_fn=no_training)
    x = torch.randn(3, requires_grad=True)
    with pytest.warns(RuntimeWarning, match="partitioner bug") as caught:
        out = run(x)
        assert run(x) is not out  # the second call: no second compile, no second warning
    assert len(caught) == 1 and caught[0].filename == __file__
    torch.testing.assert_close(out, f(x))
    out.sum().backward()
    torch.testing.assert_close(x.grad, 2 * torch.cos(2 * x.detach()))


class _Logged(torch.Tensor):
    calls: list[str] = []

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        cls.calls.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs or {})


def test_a_torch_function_subclass_input_is_refused_before_any_read() -> None:
    # the subclass's hook is the user's: eager runs it for the user's ops only, never for
    # aot's own reads of the input's sizes, strides or dtype
    gm = torch.fx.symbolic_trace(lambda x, y: x + y)
    x = torch.ones(3).as_subclass(_Logged)
    _Logged.calls.clear()
    with pytest.raises(aot.AotUnsupportedError, match="tensor subclass"):
        aot.aot_module_simplified(gm, [torch.ones(3), x], aot.identity_compiler)
    assert _Logged.calls == []
    run = aot.aot_function(lambda a, b: a * b, aot.identity_compiler)
    with pytest.raises(aot.AotUnsupportedError, match="tensor subclass"):
        run(torch.ones(3), x)
    assert _Logged.calls == []
