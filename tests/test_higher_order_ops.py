"""torch's higher-order functions inside compiled code: checkpoint, cond, functional_call.

``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`` is one tag_activation_checkpoint
node over the traced body (recomputed in backward under the eager backend and under aot);
reentrant checkpoint is traced through. ``torch.cond`` with a Python predicate runs the taken
branch in the graph; with a tensor predicate both branches are subgraphs of one
``torch.ops.higher_order.cond`` node. ``torch.func.functional_call`` traces the module's call
with the given tensors read as its parameters and buffers. Each case
is compared with eager (values and gradients) and, for graph counts, with torch.compile using a
counting backend.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
import torch._dynamo
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint

import compile_api

from .conftest import GraphCounter

BACKENDS = ("eager", "aot_eager")


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin1 = torch.nn.Linear(8, 16)
        self.lin2 = torch.nn.Linear(16, 8)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return self.lin2(torch.relu(self.lin1(x))) * scale


class Checkpointed(torch.nn.Module):
    def __init__(self, **options: Any) -> None:
        super().__init__()
        self.block = Block()
        self.options = options

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = checkpoint(self.block, x, **self.options)
        return torch.tanh(h).sum()


def torch_graph_count(fn: Callable[..., Any], *args: Any) -> int:
    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=backend)(*args)
    torch._dynamo.reset()
    return len(graphs)


def run_training(model: torch.nn.Module, x: torch.Tensor) -> tuple[Any, ...]:
    """Forward + backward; the loss, the input's gradient and every parameter's gradient."""
    x = x.detach().clone().requires_grad_(True)
    loss = model(x)
    loss.backward()
    return (loss.detach(), x.grad, *(p.grad for p in model.parameters()))


def compare_training(model: torch.nn.Module, backend: Any) -> None:
    x = torch.randn(4, 8)
    eager_model = copy.deepcopy(model)
    expected = run_training(eager_model, x)
    compiled = compile_api.compile(copy.deepcopy(model), backend=backend)
    for _ in range(2):  # a second call runs the cached graph
        for p in compiled.parameters():
            p.grad = None
        got = run_training(compiled, x)
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_reentrant_checkpoint_matches_eager_values_and_gradients(backend: str) -> None:
    compare_training(Checkpointed(use_reentrant=False), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reentrant_checkpoint_matches_eager_values_and_gradients(backend: str) -> None:
    compare_training(Checkpointed(use_reentrant=True), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_default_checkpoint_matches_eager_values_and_gradients(backend: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that use_reentrant is not given
        compare_training(Checkpointed(), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpoint_passes_keyword_arguments_to_the_function(backend: str) -> None:
    block = Block()

    def f(x: torch.Tensor) -> torch.Tensor:
        return checkpoint(block, x, use_reentrant=False, scale=3.0).sum()

    x = torch.randn(4, 8, requires_grad=True)
    expected = f(x)
    expected.backward()
    expected_grads = (x.grad, *(p.grad for p in block.parameters()))
    x.grad = None
    block.zero_grad(set_to_none=True)
    got = compile_api.compile(f, backend=backend)(x)
    got.backward()
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close((x.grad, *(p.grad for p in block.parameters())), expected_grads)


@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpoint_of_a_function_that_breaks_runs_eagerly_with_eager_gradients(
    backend: str,
) -> None:
    # The checkpointed function cannot be traced: the checkpoint call runs eagerly, and neither
    # its forward nor its backward recomputation is compiled (they would save different tensors).
    block = Block()

    def body(x: torch.Tensor) -> torch.Tensor:
        h = block.lin1(x).relu()
        torch._dynamo.graph_break()
        return block.lin2(h)

    def f(x: torch.Tensor) -> torch.Tensor:
        return checkpoint(body, x * 2, use_reentrant=False).sum()

    x = torch.randn(4, 8, requires_grad=True)
    expected = f(x)
    (expected_grad,) = torch.autograd.grad(expected, x)
    compiled = compile_api.compile(f, backend=backend)
    for _ in range(2):
        got = compiled(x)
        (got_grad,) = torch.autograd.grad(got, x)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(got_grad, expected_grad)


def test_checkpoint_is_one_graph_like_torch_compile(counter: GraphCounter) -> None:
    model = Checkpointed(use_reentrant=False)
    x = torch.randn(4, 8, requires_grad=True)
    expected = model(x)
    got = compile_api.compile(model, backend=counter, fullgraph=True)(x)
    torch.testing.assert_close(got, expected)
    assert counter.count == torch_graph_count(model, x) == 1
    (gm,) = counter.graphs
    targets = [n.target for n in gm.graph.nodes]
    assert torch.ops.higher_order.tag_activation_checkpoint in targets


class _CountAddmm(TorchDispatchMode):
    """Counts the matrix products run on real tensors (Linear's forward: aten.addmm)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(
        self, func: Any, types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        if func is torch.ops.aten.addmm.default and type(args[1]) is torch.Tensor:
            self.count += 1
        return func(*args, **(kwargs or {}))


def _forward_and_backward_addmms(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor
) -> tuple[int, int]:
    with _CountAddmm() as forward:
        out = fn(x)
    with _CountAddmm() as backward:
        out.backward()
    return forward.count, backward.count


def test_checkpoint_under_the_eager_backend_recomputes_the_body_in_backward() -> None:
    # The graph runs torch's checkpoint on the traced body: its activations are dropped after
    # the forward and the body runs again in backward, as in eager (not as the plain body).
    model = Checkpointed(use_reentrant=False)
    plain = Checkpointed(use_reentrant=False)
    plain.forward = lambda x: torch.tanh(plain.block(x)).sum()  # type: ignore[method-assign]
    x = torch.randn(4, 8, requires_grad=True)
    assert _forward_and_backward_addmms(plain, x) == (2, 0)
    eager_forward, eager_backward = _forward_and_backward_addmms(model, x)
    assert (eager_forward, eager_backward > 0) == (2, True)
    compiled = compile_api.compile(model, backend="eager", fullgraph=True)
    compiled(x)  # compile outside the counting mode
    got_forward, got_backward = _forward_and_backward_addmms(compiled, x)
    # torch 2.13's checkpoint op turns early stop off: the whole body is recomputed. torch
    # 2.11's op run outside aot only tags the body's nodes and runs it: nothing is recomputed,
    # for torch.compile(backend="eager") as for us (the graph holds the same op).
    expected = (2, 2) if torch.__version__ >= "2.13" else (2, 0)
    assert (got_forward, got_backward) == expected


@pytest.mark.parametrize("partition", ["default_partition", "min_cut_partition"])
def test_checkpoint_under_aot_saves_the_region_inputs_and_recomputes_its_activations(
    partition: str,
) -> None:
    import aot

    block = Block()

    def f(x: torch.Tensor, use_checkpoint: bool) -> torch.Tensor:
        def body(a: torch.Tensor) -> torch.Tensor:
            return block(a).sin().exp()

        h = checkpoint(body, x * 2, use_reentrant=False) if use_checkpoint else body(x * 2)
        return (h * 3).sum()

    def saved_by_forward(use_checkpoint: bool) -> list[str]:
        saved: list[str] = []

        def fw(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
            (outputs,) = [n.args[0] for n in gm.graph.nodes if n.op == "output"]
            saved.extend(str(getattr(o, "target", o)) for o in outputs[1:])
            return gm.forward

        def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
            return aot.aot_module_simplified(
                gm, example_inputs, fw, aot.eager_compiler, getattr(aot, partition)
            )

        x = torch.randn(4, 8, requires_grad=True)
        compile_api.reset()
        got = compile_api.compile(f, backend=backend, fullgraph=True)(x, use_checkpoint)
        (got_grad,) = torch.autograd.grad(got, x)
        want = f(x, use_checkpoint)
        (want_grad,) = torch.autograd.grad(want, x)
        torch.testing.assert_close((got, got_grad), (want, want_grad))
        return saved

    inside = ("addmm", "relu", "sin", "exp")  # ops of the checkpointed body
    assert any(op in name for name in saved_by_forward(False) for op in inside)
    saved = saved_by_forward(True)
    assert not any(op in name for name in saved for op in inside), saved


@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpoint_of_a_random_body_keeps_eager_random_numbers_and_gradients(
    backend: str,
) -> None:
    # The recomputed dropout draws the forward's mask (the eager backend runs torch's checkpoint
    # keeping the RNG state; aot replays the saved generator state): eager's numbers.
    block = Block()

    def f(x: torch.Tensor) -> torch.Tensor:
        body = lambda a: torch.nn.functional.dropout(block(a), 0.5, training=True)  # noqa: E731
        return checkpoint(body, x, use_reentrant=False).sum()

    def run(fn: Callable[[torch.Tensor], torch.Tensor]) -> list[torch.Tensor]:
        torch.manual_seed(3)
        x = torch.randn(4, 8, requires_grad=True)
        out = fn(x)
        return [out.detach(), *torch.autograd.grad(out, (x, *block.parameters()))]

    want = run(f)
    torch.testing.assert_close(run(compile_api.compile(f, backend=backend)), want)


def test_reentrant_checkpoint_of_inputs_without_grad_keeps_eager_semantics(
    counter: GraphCounter,
) -> None:
    # Eager's reentrant checkpoint cuts its outputs from the parameters when no input requires
    # grad; Strata runs that call eagerly (a break) rather than change the meaning.
    model = Checkpointed(use_reentrant=True)
    x = torch.randn(4, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = model(x)
        got = compile_api.compile(model, backend=counter)(x)
    torch.testing.assert_close(got, expected)
    assert got.requires_grad == expected.requires_grad


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("flag", [True, False])
def test_cond_with_python_predicate_runs_the_taken_branch_in_the_graph(
    backend: str, flag: bool
) -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.cond(flag, lambda a, b: (a * b).sin(), lambda a, b: (a + b).cos(), (x, y))

    x = torch.randn(5, requires_grad=True)
    y = torch.randn(5)
    expected = f(x, y)
    (expected_grad,) = torch.autograd.grad(expected.sum(), x)
    got = compile_api.compile(f, backend=backend, fullgraph=True)(x, y)
    (got_grad,) = torch.autograd.grad(got.sum(), x)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_grad, expected_grad)


def test_cond_with_python_predicate_is_one_graph_like_torch_compile(
    counter: GraphCounter,
) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.cond(True, lambda a: a.sin(), lambda a: a.cos(), (x,)) + 1

    x = torch.randn(5)
    got = compile_api.compile(f, backend=counter)(x)
    torch.testing.assert_close(got, f(x))
    assert counter.count == torch_graph_count(f, x) == 1


COND_WEIGHT = torch.randn(5, requires_grad=True)  # a global tensor one branch reads


def cond_on_tensor(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    z = torch.cond(y.sum() > 0, lambda a: a.sin() * COND_WEIGHT, lambda a: a.cos(), (y,))
    return z + 1


def cond_nested(x: torch.Tensor) -> torch.Tensor:
    def inner(a: torch.Tensor) -> torch.Tensor:
        return torch.cond(a.mean() > 0.5, lambda b: b * COND_WEIGHT, lambda b: b - x, (a,))

    return torch.cond(x.sum() > 0, inner, lambda a: a.cos(), (x,)) * 2


def cond_tuple(x: torch.Tensor) -> torch.Tensor:
    scale = x.mean()
    a, b = torch.cond(
        x.sum() > 0,
        lambda p, q: (p + q, p * scale * COND_WEIGHT),
        lambda p, q: (p - q, q.exp()),
        (x, x.flip(0)),
    )
    return a * b


def cond_nested_twice(x: torch.Tensor) -> torch.Tensor:
    def inner(b: torch.Tensor) -> torch.Tensor:
        return torch.cond(b.max() > 0.62, lambda c: c * COND_WEIGHT, lambda c: c.exp(), (b,))

    def middle(a: torch.Tensor) -> torch.Tensor:
        return torch.cond(a.mean() > 0.5, inner, lambda b: b - x, (a,))

    return torch.cond(x.sum() > 0, middle, lambda a: a.cos(), (x,)) * 2


def cond_writing_a_new_tensor(x: torch.Tensor) -> torch.Tensor:
    def branch(a: torch.Tensor) -> torch.Tensor:
        z = torch.zeros_like(a)
        z.add_(a * COND_WEIGHT)  # an in-place write the branch's functionalization removes
        return z

    return torch.cond(x.sum() > 0, branch, lambda a: a.cos(), (x,)) + 1


COND_PROGRAMS = {
    "cond": cond_on_tensor,
    "nested": cond_nested,
    "nested_twice": cond_nested_twice,
    "tuple": cond_tuple,
    "writes": cond_writing_a_new_tensor,
}
# Inputs that take each branch: positive sums (with means above and below 0.5), negative sums.
COND_INPUTS = (0.6, 0.3, -0.6)


def _cond_run(fn: Callable[[torch.Tensor], torch.Tensor], level: float) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    x = (level + 0.05 * torch.rand(5, generator=gen)).requires_grad_(True)
    out = fn(x)
    grads = torch.autograd.grad(out.sum(), (x, COND_WEIGHT), materialize_grads=True)
    return [out.detach(), *grads]


@pytest.mark.parametrize("backend", [*BACKENDS, "inductor"])
@pytest.mark.parametrize("name", sorted(COND_PROGRAMS))
def test_cond_with_tensor_predicate_is_one_graph_with_eager_values_and_gradients(
    name: str, backend: str
) -> None:
    # Both branches are subgraphs of one torch.ops.higher_order.cond node, as torch.compile
    # captures them; aot traces through the op (forward and backward), inductor_lite compiles
    # each branch (tests/test_inductor_runtime_values.py checks that no graph runs eagerly).
    fn = COND_PROGRAMS[name]
    counter = GraphCounter()
    inner = compile_api.lookup_backend(backend)

    def counting(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        counter(gm, example_inputs)
        return inner(gm, example_inputs)

    compile_api.reset()
    compiled = compile_api.compile(fn, backend=counting, fullgraph=True)
    with warnings.catch_warnings():
        # a backend failure would run the captured graph instead, with a warning: no fallback
        warnings.simplefilter("error", RuntimeWarning)
        for level in COND_INPUTS:
            got = _cond_run(compiled, level)
            torch.testing.assert_close(got, _cond_run(fn, level))
    graphs = [n for gm in counter.graphs for n in gm.graph.nodes if n.target is torch.cond]
    assert graphs == []  # the op, never the eager wrapper
    conds = [
        n
        for gm in counter.graphs
        for n in gm.graph.nodes
        if n.target is torch.ops.higher_order.cond
    ]
    assert len(conds) == 1
    theirs = GraphCounter()
    torch._dynamo.reset()
    torch.compile(fn, backend=theirs)(torch.rand(5))
    torch._dynamo.reset()
    assert counter.count == theirs.count == 1


def cond_on_size(x: torch.Tensor) -> torch.Tensor:
    # under dynamic shapes the predicate is a SymBool of the size symbol, not a constant
    return torch.cond(x.shape[0] > 4, lambda a: a.sin() * 2, lambda a: a.cos(), (x,)) + 1


def cond_on_bool_item(x: torch.Tensor) -> torch.Tensor:
    flag = (x.sum() > 0).item()  # a SymBool under capture_scalar_outputs
    return torch.cond(flag, lambda a: a.sin() * 2, lambda a: a.cos(), (x,)) + 1


SYMBOLIC_PREDICATES = {
    "size": (cond_on_size, {"dynamic": True}, {}),
    "bool_item": (cond_on_bool_item, {}, {"capture_scalar_outputs": True}),
}
# sizes on both sides of 4, sums of both signs
SYMBOLIC_PREDICATE_INPUTS = ((3, 1.0), (6, -1.0), (7, 1.0), (2, -1.0))


def _symbolic_predicate_graphs(
    name: str, backend: Any, *, train: bool
) -> tuple[int, list[torch.fx.GraphModule]]:
    """Run the case on every input against eager (values, and gradients when training);
    return our graph count and the graphs."""
    fn, options, config = SYMBOLIC_PREDICATES[name]
    for key, value in config.items():
        setattr(compile_api.config, key, value)
    counter = GraphCounter()
    inner = compile_api.lookup_backend(backend)

    def counting(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        counter(gm, example_inputs)
        return inner(gm, example_inputs)

    compile_api.reset()
    compiled = compile_api.compile(fn, backend=counting, fullgraph=True, **options)
    gen = torch.Generator().manual_seed(3)
    for n, sign in SYMBOLIC_PREDICATE_INPUTS:
        x = (sign * (0.1 + torch.rand(n, generator=gen))).requires_grad_(train)
        with warnings.catch_warnings(), torch.set_grad_enabled(train):
            warnings.simplefilter("error", RuntimeWarning)  # no backend fallback
            got = compiled(x)
            want = fn(x)
        torch.testing.assert_close(got, want)
        if train:
            (got_grad,) = torch.autograd.grad(got.sum(), x)
            (want_grad,) = torch.autograd.grad(want.sum(), x)
            torch.testing.assert_close(got_grad, want_grad)
    return counter.count, counter.graphs


def _torch_symbolic_predicate_count(name: str) -> int:
    fn, options, config = SYMBOLIC_PREDICATES[name]
    theirs = GraphCounter()
    torch._dynamo.reset()
    with torch._dynamo.config.patch(**config):
        compiled = torch.compile(fn, backend=theirs, fullgraph=True, **options)
        for n, sign in SYMBOLIC_PREDICATE_INPUTS:
            compiled(sign * (0.1 + torch.rand(n)))
    torch._dynamo.reset()
    return theirs.count


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(SYMBOLIC_PREDICATES))
def test_cond_on_a_symbolic_bool_is_captured_like_torch_with_eager_values_and_gradients(
    name: str, backend: str, train: bool
) -> None:
    count, graphs = _symbolic_predicate_graphs(name, backend, train=train)
    conds = [n for gm in graphs for n in gm.graph.nodes
             if n.target is torch.ops.higher_order.cond]
    assert len(conds) == count  # the predicate stays symbolic: one cond op per graph
    assert all(isinstance(c.args[0].meta["example_value"], torch.SymBool) for c in conds)
    # dynamic=True: one graph; the item() case: static sizes first, then dynamic, as torch
    assert count == _torch_symbolic_predicate_count(name)


def test_cond_branch_with_a_python_side_effect_runs_eagerly_and_raises_as_eager() -> None:
    log: list[int] = []

    def f(x: torch.Tensor) -> torch.Tensor:
        def branch(a: torch.Tensor) -> torch.Tensor:
            log.append(1)
            return a.sin()

        return torch.cond(x.sum() > 0, branch, lambda a: a.cos(), (x,))

    x = torch.randn(3)
    # torch refuses side effects in branches; our trace breaks and the eager call raises too.
    with pytest.raises(Exception, match="side effect") as eager:
        f(x)
    torch._dynamo.reset()
    with pytest.raises(type(eager.value), match="side effect"):
        compile_api.compile(f, backend="eager")(x)
    compile_api.reset()
    with pytest.raises(Exception, match=r"torch\.cond branch changes Python state"):
        compile_api.compile(f, backend="eager", fullgraph=True)(x)


class TiedPair(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)
        self.b.weight = self.a.weight  # tied: replacing a.weight replaces b.weight too

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


class ReadsParametersByIteration(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * next(iter(self.parameters()))


FUNCTIONAL_MODULES = {"block": Block, "tied": TiedPair}


def _functional_case(
    make: Callable[[], torch.nn.Module],
) -> tuple[torch.nn.Module, dict[str, torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]:
    module = make()
    params = {
        k: (v.detach() * 1.5).requires_grad_(True) for k, v in module.named_parameters()
    }

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(module, params, (x * 2,)).relu().sum()

    return module, params, f


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(FUNCTIONAL_MODULES))
def test_functional_call_is_one_graph_with_eager_values_and_gradients(
    name: str, backend: str
) -> None:
    module, params, f = _functional_case(FUNCTIONAL_MODULES[name])
    before = {k: v.clone() for k, v in module.state_dict().items()}
    x = torch.randn(4, 8)
    expected = f(x)
    expected_grads = torch.autograd.grad(expected, list(params.values()))
    counter = GraphCounter()
    inner = compile_api.lookup_backend(backend)

    def counting(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        counter(gm, example_inputs)
        return inner(gm, example_inputs)

    compiled = compile_api.compile(f, backend=counting, fullgraph=True)
    for _ in range(2):
        got = compiled(x)
        got_grads = torch.autograd.grad(got, list(params.values()))
        torch.testing.assert_close((got, got_grads), (expected, expected_grads))
    torch.testing.assert_close(module.state_dict(), before)  # the module's own are untouched
    assert counter.count == torch_graph_count(f, x) == 1


def test_functional_call_of_a_module_reading_parameters_otherwise_breaks_with_eager_results(
    counter: GraphCounter,
) -> None:
    # parameters() would hand the module its own tensors, not the replacements: refused.
    _, params, f = _functional_case(ReadsParametersByIteration)
    x = torch.randn(4, 8)
    expected = f(x)
    (expected_grad,) = torch.autograd.grad(expected, list(params.values()))
    got = compile_api.compile(f, backend=counter)(x)
    (got_grad,) = torch.autograd.grad(got, list(params.values()))
    torch.testing.assert_close((got, got_grad), (expected, expected_grad))
    compile_api.reset()
    with pytest.raises(Exception, match=r"functional_call"):
        compile_api.compile(f, backend="eager", fullgraph=True)(x)


# --------------------------------------------------------------------------- torch.func transforms

SCALE = torch.randn(4)  # a global tensor the transformed functions read


def _vmap_closure(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.func.vmap(lambda row: (row * w).sum())(x.sin()) + 1


def _vmap_builtin(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.vmap(torch.dot, in_dims=(0, None))(x, w) * 2


def _grad_global(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.func.grad(lambda y: (y.sin() * SCALE).sum())(x) * w


def _grad_and_value(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    g, v = torch.func.grad_and_value(lambda y: ((y * w) ** 2).sum())(x)
    return g * v


TRANSFORMS = {
    "vmap_closure": _vmap_closure,
    "vmap_builtin": _vmap_builtin,
    "grad_global": _grad_global,
    "grad_and_value": _grad_and_value,
}


def _run_transform(fn: Callable[..., torch.Tensor]) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, generator=gen)
    w = torch.randn(4, generator=gen, requires_grad=True)
    out = fn(x, w)
    out.sum().backward()
    assert w.grad is not None
    return [out.detach(), w.grad]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_func_transform_is_one_graph_with_eager_values_and_gradients(
    name: str, backend: str
) -> None:
    fn = TRANSFORMS[name]
    want = _run_transform(fn)
    counter = GraphCounter()
    inner = compile_api.lookup_backend(backend)

    def counting(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        counter(gm, example_inputs)
        return inner(gm, example_inputs)

    compile_api.reset()
    got = _run_transform(compile_api.compile(fn, backend=counting, fullgraph=True))
    torch.testing.assert_close(got, want)
    theirs = GraphCounter()
    torch._dynamo.reset()
    _run_transform(torch.compile(fn, backend=theirs))
    torch._dynamo.reset()
    assert counter.count == theirs.count == 1


def test_func_transform_of_a_module_method_breaks_cleanly_with_eager_results(
    counter: GraphCounter,
) -> None:
    block = Block()

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.func.vmap(block)(x) + 1  # the module's parameters are not lifted

    x = torch.randn(2, 3, 8)
    got = compile_api.compile(f, backend=counter)(x)
    torch.testing.assert_close(got, f(x))


# ----------------------------------------------------- data-dependent values (torch's defaults)


def _item(x: torch.Tensor) -> torch.Tensor:
    return x * x.sum().item()


def _nonzero(x: torch.Tensor) -> torch.Tensor:
    return torch.nonzero(x > 0).float().sum() + x.sum()


def _mask(x: torch.Tensor) -> torch.Tensor:
    return x[x > 0].sum() * 2


@pytest.mark.parametrize("fn", [_item, _nonzero, _mask], ids=["item", "nonzero", "mask"])
def test_data_dependent_op_breaks_cleanly_in_as_many_graphs_as_torch(
    counter: GraphCounter, fn: Callable[[torch.Tensor], torch.Tensor]
) -> None:
    # torch 2.13's defaults (capture_scalar_outputs and capture_dynamic_output_shape_ops off):
    # a break at the op, a graph on each side (unbacked symbols: test_data_dependent_values.py).
    x = torch.randn(3, 4)
    got = compile_api.compile(fn, backend=counter)(x)
    torch.testing.assert_close(got, fn(x))
    theirs = GraphCounter()
    torch._dynamo.reset()
    torch.compile(fn, backend=theirs)(x)
    torch._dynamo.reset()
    assert counter.count == theirs.count == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpoint_of_a_layer_returning_none_beside_tensors_is_one_graph_with_eager_gradients(
    backend: str,
) -> None:
    # transformers' checkpointed layers return (hidden, None): traced inline, one graph.
    block = Block()

    def layer(x: torch.Tensor) -> tuple[torch.Tensor, None]:
        return block(x).relu(), None

    def f(x: torch.Tensor) -> torch.Tensor:
        hidden, attn = checkpoint(layer, x, use_reentrant=False)
        assert attn is None
        return hidden.sum()

    x = torch.randn(4, 8, requires_grad=True)
    expected = f(x)
    expected_grads = torch.autograd.grad(expected, (x, *block.parameters()))
    counter = GraphCounter()
    inner = compile_api.lookup_backend(backend)

    def counting(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        counter(gm, example_inputs)
        return inner(gm, example_inputs)

    got = compile_api.compile(f, backend=counting, fullgraph=True)(x)
    got_grads = torch.autograd.grad(got, (x, *block.parameters()))
    torch.testing.assert_close((got, got_grads), (expected, expected_grads))
    assert counter.count == torch_graph_count(f, x) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_cond_inside_a_checkpoint_is_one_graph_with_eager_values_and_gradients(
    backend: str,
) -> None:
    # torch's checkpoint op cannot run a cond (its caching mode has no rule for it; torch.compile
    # 2.13 fails on this program): the body is traced inline, with the cond node inside.
    lin = torch.nn.Linear(4, 4)

    def body(a: torch.Tensor) -> torch.Tensor:
        return torch.cond(a.sum() > 0, lambda t: lin(t).sin(), lambda t: lin(t).cos(), (a,))

    def f(x: torch.Tensor) -> torch.Tensor:
        return checkpoint(body, x * 2, use_reentrant=False).sum()

    counter = GraphCounter()
    inner = compile_api.lookup_backend(backend)

    def counting(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        counter(gm, example_inputs)
        return inner(gm, example_inputs)

    compiled = compile_api.compile(f, backend=counting, fullgraph=True)
    for sign in (1.0, -1.0):
        x = (torch.rand(3, 4) * sign).requires_grad_(True)
        got = compiled(x)
        got_grads = torch.autograd.grad(got, (x, lin.weight))
        want = f(x)
        want_grads = torch.autograd.grad(want, (x, lin.weight))
        torch.testing.assert_close((got, got_grads), (want, want_grads))
    assert counter.count == 1


@pytest.mark.parametrize("p", [0.0, 0.5])
def test_checkpoint_with_dropout_is_one_checkpoint_node_with_eager_numbers(
    counter: GraphCounter, p: float
) -> None:
    # transformers layers call dropout with the config's rate: 0 draws nothing (torch's
    # checkpoint op); a real rate is our RNG-keeping checkpoint op, whose recomputation draws
    # the forward's mask (eager's numbers; test_checkpoint_rng.py checks the memory side).
    block = Block()

    def f(x: torch.Tensor) -> torch.Tensor:
        def body(a: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.dropout(block(a), p, training=True)

        return checkpoint(body, x, use_reentrant=False).sum()

    def run(fn: Callable[[torch.Tensor], torch.Tensor]) -> list[torch.Tensor]:
        torch.manual_seed(5)
        x = torch.randn(4, 8, requires_grad=True)
        out = fn(x)
        return [out.detach(), *torch.autograd.grad(out, (x, *block.parameters()))]

    want = run(f)
    torch.testing.assert_close(run(compile_api.compile(f, backend=counter)), want)
    (gm,) = counter.graphs
    targets = [n.target for n in gm.graph.nodes]
    if p:
        assert "checkpoint_keeping_rng" in [getattr(t, "__name__", "") for t in targets]
    else:
        assert torch.ops.higher_order.tag_activation_checkpoint in targets
