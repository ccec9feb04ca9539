"""The default backend (inductor_lite, C++) compiles ``torch.cond`` and data-dependent sizes.

A cond's branches are compiled as graphs of their own and the generated wrapper picks one at
run time; ``item()``, ``nonzero``, boolean masks and ``unique`` stay aten calls whose results
bind unbacked size symbols that the kernels after them loop over. Every case runs with
``fallback="raise"`` (a graph we could not compile fails the test) and checks that no compiled
graph ran its aten graph instead of its kernels. Values and gradients are compared with eager
and with torch.compile (its aot_eager backend: its capture and autograd, no code generation),
on inputs that take each branch and select none, one or several elements.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import torch
import torch._dynamo
import torch._dynamo.config

import compile_api
import inductor_lite
import inductor_lite.compile as inductor_compile

RAISE = inductor_lite.InductorConfig(fallback="raise")


def strict_inductor(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
    """inductor_lite that raises instead of running a graph it cannot compile eagerly."""
    return inductor_lite.compile_fx(gm, example_inputs, config=RAISE)


@pytest.fixture
def compiled_graphs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every CompiledGraph inductor_lite builds (top-level graphs and cond branches)."""
    compile_api.config.suppress_errors = False  # a backend failure fails the test
    made: list[Any] = []
    real = inductor_compile._compile

    def recording(*args: Any, **kwargs: Any) -> Any:
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(inductor_compile, "_compile", recording)
    yield made
    for graph in made:
        assert graph.eager_calls == 0, graph.wrapper_source  # every call ran the kernels


W = torch.linspace(-1.0, 1.0, 5).requires_grad_(True)  # a global tensor a branch reads


def cond_global(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    return torch.cond(y.sum() > 0, lambda a: a.sin() * W, lambda a: a.cos(), (y,)) + 1


def cond_nested(x: torch.Tensor) -> torch.Tensor:
    def inner(a: torch.Tensor) -> torch.Tensor:
        return torch.cond(a.mean() > 0.5, lambda b: b * W, lambda b: b - x, (a,))

    return torch.cond(x.sum() > 0, inner, lambda a: a.cos(), (x,)) * 2


def cond_tuple(x: torch.Tensor) -> torch.Tensor:
    scale = x.mean()
    a, b = torch.cond(
        x.sum() > 0,
        lambda p, q: (p + q, p * scale * W),
        lambda p, q: (p - q, q.exp()),
        (x, x.flip(0)),
    )
    return a * b


def cond_matrix(x: torch.Tensor) -> torch.Tensor:
    # 2-d operands, a reduction and a matmul inside the branches
    m = x.reshape(5, 1) * (W + 1)  # the sign of sum(x): no sum near 0
    out = torch.cond(
        m.sum() > 0,
        lambda t: torch.softmax(t, dim=-1) @ t.flip(0),
        lambda t: (t.relu() + 1).log(),
        (m,),
    )
    return out.sum(0)


CONDS = {f.__name__: f for f in (cond_global, cond_nested, cond_tuple, cond_matrix)}
LEVELS = (0.6, 0.3, -0.6)  # positive sums (means above and below 0.5), negative sums


def _run(fn: Callable[[torch.Tensor], torch.Tensor], level: float) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    x = (level + 0.05 * torch.rand(5, generator=gen)).requires_grad_(True)
    out = fn(x)
    grads = torch.autograd.grad(out.sum(), (x, W), materialize_grads=True)
    return [out.detach(), *grads]


def _torch_compiled(fn: Callable[..., Any], **config: bool) -> Callable[..., Any]:
    torch._dynamo.reset()

    def run(*args: Any) -> Any:
        with torch._dynamo.config.patch(**config):
            return torch.compile(fn, backend="aot_eager", fullgraph=True)(*args)

    return run


@pytest.mark.parametrize("name", sorted(CONDS))
def test_cond_compiles_each_branch_with_eager_values_and_gradients(
    name: str, compiled_graphs: list[Any]
) -> None:
    fn = CONDS[name]
    ours = compile_api.compile(fn, fullgraph=True, backend=strict_inductor)
    theirs = _torch_compiled(fn)
    for level in LEVELS:
        want = _run(fn, level)
        torch.testing.assert_close(_run(ours, level), want)
        torch.testing.assert_close(_run(theirs, level), want)
    torch._dynamo.reset()
    # forward and backward graphs, and two compiled branches per cond in each
    assert len(compiled_graphs) >= 6
    assert sum(g.kernel_count for g in compiled_graphs) >= 4


@pytest.mark.parametrize("name", sorted(CONDS))
def test_cond_compiles_for_inference_with_eager_values(
    name: str, compiled_graphs: list[Any]
) -> None:
    fn = CONDS[name]
    ours = compile_api.compile(fn, fullgraph=True, backend=strict_inductor)
    with torch.no_grad():
        for level in LEVELS:
            x = level + 0.05 * torch.rand(5)
            torch.testing.assert_close(ours(x), fn(x))
    assert len(compiled_graphs) >= 3


def test_cond_with_dynamic_sizes_compiles_its_branches_for_every_size(
    compiled_graphs: list[Any],
) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda a: a.sin() * 2, lambda a: a.cos() - 1, (x,))

    ours = compile_api.compile(f, fullgraph=True, dynamic=True, backend=strict_inductor)
    for n in (4, 7, 9):
        for sign in (1.0, -1.0):
            x = (sign * torch.rand(n, 3)).requires_grad_(True)
            got = ours(x)
            (got_grad,) = torch.autograd.grad(got.sum(), x)
            want = f(x)
            (want_grad,) = torch.autograd.grad(want.sum(), x)
            torch.testing.assert_close((got, got_grad), (want, want_grad))


def test_our_backend_under_torch_compile_compiles_its_cond(compiled_graphs: list[Any]) -> None:
    torch._dynamo.reset()
    compiled = torch.compile(cond_tuple, backend=strict_inductor, fullgraph=True)
    for level in LEVELS:
        torch.testing.assert_close(_run(compiled, level), _run(cond_tuple, level))
    torch._dynamo.reset()
    assert len(compiled_graphs) >= 6


def cond_on_size(x: torch.Tensor) -> torch.Tensor:
    return torch.cond(x.shape[0] > 4, lambda a: a.sin() * 2, lambda a: a.cos(), (x,)) + 1


def cond_on_bool_item(x: torch.Tensor) -> torch.Tensor:
    flag = (x.sum() > 0).item()
    return torch.cond(flag, lambda a: a.sin() * 2, lambda a: a.cos(), (x,)) + 1


@pytest.mark.parametrize(
    ("fn", "dynamic", "capture"),
    [(cond_on_size, True, False), (cond_on_bool_item, None, True)],
    ids=["size", "bool_item"],
)
def test_cond_on_a_symbolic_bool_compiles_for_inference_with_eager_values(
    fn: Callable[[torch.Tensor], torch.Tensor],
    dynamic: bool | None,
    capture: bool,
    compiled_graphs: list[Any],
) -> None:
    # the predicate is a bool the wrapper computes (a size comparison, an item()) and hands
    # to the branch choice; torch.compile (aot_eager) on the same inputs for reference
    compile_api.config.capture_scalar_outputs = capture
    ours = compile_api.compile(fn, fullgraph=True, dynamic=dynamic, backend=strict_inductor)
    torch._dynamo.reset()
    theirs = torch.compile(fn, backend="aot_eager", fullgraph=True, dynamic=dynamic)
    with torch.no_grad(), torch._dynamo.config.patch(capture_scalar_outputs=capture):
        for n, sign in ((3, 1.0), (6, -1.0), (7, 1.0), (2, -1.0)):
            x = sign * (0.1 + torch.rand(n))
            want = fn(x)
            torch.testing.assert_close(ours(x), want)
            torch.testing.assert_close(theirs(x), want)
    torch._dynamo.reset()
    assert len(compiled_graphs) >= 3  # a graph and its two branches


SYMBOLIC_PREDICATES = {
    "size": (cond_on_size, True, False),
    "bool_item": (cond_on_bool_item, None, True),
}
# sizes on both sides of 4, sums of both signs
SYMBOLIC_PREDICATE_INPUTS = ((3, 1.0), (6, -1.0), (7, 1.0), (2, -1.0))


def train_on_symbolic_predicates(
    fn: Callable[[torch.Tensor], torch.Tensor],
    ours: Callable[..., Any],
    capture: bool,
    device: str = "cpu",
) -> None:
    """Values and gradients of ``ours`` vs eager and torch.compile (aot_eager) on inputs
    that take each branch at several sizes."""
    dynamic = None if capture else True
    torch._dynamo.reset()
    theirs = torch.compile(fn, backend="aot_eager", fullgraph=True, dynamic=dynamic)
    with torch._dynamo.config.patch(capture_scalar_outputs=capture):
        for n, sign in SYMBOLIC_PREDICATE_INPUTS:
            x = sign * (0.1 + torch.rand(n, generator=torch.Generator().manual_seed(n)))
            results = []
            for f in (fn, ours, theirs):
                leaf = x.to(device).requires_grad_(True)
                out = f(leaf)
                results.append([out.detach(), *torch.autograd.grad(out.sum(), leaf)])
            torch.testing.assert_close(results[1], results[0])
            torch.testing.assert_close(results[2], results[0])
    torch._dynamo.reset()


def symbolic_bool_inputs(graphs: list[Any]) -> int:
    """How many of the compiled graphs' inputs are bools known only at run time."""
    return sum(b.boolean for g in graphs for b in g.lowered.symbols)


@pytest.mark.parametrize("name", sorted(SYMBOLIC_PREDICATES))
def test_cond_on_a_symbolic_bool_trains_with_its_predicate_a_backward_input(
    name: str, compiled_graphs: list[Any]
) -> None:
    # the backward takes the forward's predicate as a SymBool graph input; it ran as aten
    # calls (a backend fallback) before inductor_lite took bool inputs
    fn, dynamic, capture = SYMBOLIC_PREDICATES[name]
    compile_api.config.capture_scalar_outputs = capture
    ours = compile_api.compile(fn, fullgraph=True, dynamic=dynamic, backend=strict_inductor)
    train_on_symbolic_predicates(fn, ours, capture)
    assert symbolic_bool_inputs(compiled_graphs) >= 1
    assert sum(g.kernel_count for g in compiled_graphs) >= 4


def bool_item_returned(x: torch.Tensor) -> Any:
    return x * 2, (x.sum() > 0).item()


def test_a_bool_item_returned_by_the_graph_is_a_bool_as_in_eager(
    compiled_graphs: list[Any],
) -> None:
    # the wrapper binds it as 0 or 1 for the kernels; it returned that int
    compile_api.config.capture_scalar_outputs = True
    ours = compile_api.compile(bool_item_returned, fullgraph=True, backend=strict_inductor)
    theirs = _torch_compiled(bool_item_returned, capture_scalar_outputs=True)
    for sign in (1.0, -1.0):
        x = sign * torch.ones(3)
        want = bool_item_returned(x)
        got = ours(x)
        assert type(got[1]) is bool and got[1] == want[1]
        assert type(theirs(x)[1]) is bool
        torch.testing.assert_close(got[0], want[0])
    torch._dynamo.reset()


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", sorted(CONDS))
def test_our_backend_under_torch_compile_trains_its_cond_graphs(
    name: str, dynamic: bool, compiled_graphs: list[Any]
) -> None:
    # torch.compile hands the backend its own graph: the example inputs (dynamic: fake
    # tensors of its fake mode) and the cond subgraphs' metadata come from torch's capture,
    # and the compile runs inside torch's tracing context (torch 2.11 took its fake mode
    # from there while tracing a branch: "Mixing fake modes NYI")
    fn = CONDS[name]
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=strict_inductor, fullgraph=True, dynamic=dynamic)
    for level in LEVELS:
        torch.testing.assert_close(_run(compiled, level), _run(fn, level))
    torch._dynamo.reset()
    assert len(compiled_graphs) >= 6


# ------------------------------------------------------------------ data-dependent values


def scale_by_item(x: torch.Tensor) -> torch.Tensor:
    return x * x.sum().item()


def item_returned(x: torch.Tensor) -> Any:
    return x.abs().max().item(), (x + 1).sum().int().item(), x + 1


def count_nonzero_rows(x: torch.Tensor) -> torch.Tensor:
    return torch.nonzero(x > 0).float().sum() + x.sum()


def nonzero_returned(x: torch.Tensor) -> torch.Tensor:
    return torch.nonzero(x > 0)


def masked_sum(x: torch.Tensor) -> torch.Tensor:
    return x[x > 0].sum() * 2


def masked_values(x: torch.Tensor) -> torch.Tensor:
    picked = x[x > 0]
    return (picked * 2).exp() + picked.numel()


def unique_sum(x: torch.Tensor) -> torch.Tensor:
    return torch.unique((x * 2).round()).sum()


def sized_by_item(x: torch.Tensor) -> torch.Tensor:
    n = (x > 0).sum().item()
    return torch.ones(n) * x.sum()


def masked_head(x: torch.Tensor) -> torch.Tensor:
    # the slice end is min(count, 2): a count of 0 or 1 must not be taken for 2
    return x[x > 0][:2] * 2


def flag_item(x: torch.Tensor) -> torch.Tensor:
    # max is exact (a sum's rounding would decide the truncation): no rounding noise
    return x * (x.sum() > 0).item() + int(x.max() * 3)


def filled_by_item(x: torch.Tensor) -> torch.Tensor:
    return torch.full((3,), x.sum().item()) + 1  # a float item() handed to an aten call


def sliced_by_item(x: torch.Tensor) -> torch.Tensor:
    return x.flatten()[: (x > 0).sum().item()] * 2


def arange_of_item(x: torch.Tensor) -> torch.Tensor:
    return torch.arange((x > 0).sum().item()) * 2 + x.sum()


def repeated(x: torch.Tensor) -> torch.Tensor:
    return torch.repeat_interleave((x.flatten() > 0).long() + 1).float().sum()


def gathered_by_nonzero(x: torch.Tensor) -> torch.Tensor:
    return x[x.nonzero()[:, 0]].sum(0)


DATA_DEPENDENT = [
    filled_by_item,
    sliced_by_item,
    arange_of_item,
    repeated,
    gathered_by_nonzero,
    masked_head,
    flag_item,
    scale_by_item,
    item_returned,
    count_nonzero_rows,
    nonzero_returned,
    masked_sum,
    masked_values,
    unique_sum,
    sized_by_item,
]
# none, one and several elements above 0
INPUTS = (
    torch.linspace(-2.0, -0.5, 12).reshape(3, 4),
    torch.linspace(-2.0, 0.1, 12).reshape(3, 4),
    torch.linspace(-1.0, 2.0, 12).reshape(3, 4),
)


@pytest.mark.parametrize("fn", DATA_DEPENDENT, ids=[f.__name__ for f in DATA_DEPENDENT])
def test_data_dependent_sizes_compile_with_eager_values(
    fn: Callable[..., Any], compiled_graphs: list[Any]
) -> None:
    compile_api.config.capture_scalar_outputs = True
    compile_api.config.capture_dynamic_output_shape_ops = True
    ours = compile_api.compile(fn, backend=strict_inductor)
    theirs = _torch_compiled(
        fn, capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True
    )
    for x in INPUTS:
        want = fn(x)
        torch.testing.assert_close(ours(x), want)
        torch.testing.assert_close(theirs(x), want)
    torch._dynamo.reset()
    assert compiled_graphs and all(g.kernel_count for g in compiled_graphs)


@pytest.mark.parametrize("fn", [scale_by_item, masked_values, sized_by_item])
def test_data_dependent_sizes_train_with_eager_gradients(
    fn: Callable[..., Any], compiled_graphs: list[Any]
) -> None:
    ours = compile_api.compile(fn, backend=strict_inductor, fullgraph=True)
    for x in INPUTS:
        w = torch.linspace(0.5, 1.5, 4).requires_grad_(True)
        want = fn(x * w)
        (want_grad,) = torch.autograd.grad(want.sum(), w)
        got = ours(x * w)
        (got_grad,) = torch.autograd.grad(got.sum(), w)
        torch.testing.assert_close((got, got_grad), (want, want_grad))
    assert len(compiled_graphs) >= 2  # forward and backward
