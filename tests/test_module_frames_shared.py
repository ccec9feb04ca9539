"""One compiled ``forward`` serves every layer of a stack (torch's inline_inbuilt_nn_modules).

A layer whose ``forward`` is a frame of its own (a break in it, or the loop over the layers
broke) was guarded on the module's identity, so each layer compiled its ``forward`` again and
a deep stack hit the cache size limit and ran eagerly. Now a module passed to a frame is
guarded by its class, the values the trace read from it and its parameters' metadata: layers
of one shape share one entry; a layer of another shape, ``training`` flag or ``requires_grad``
recompiles; weights changed in place or replaced are read on every call. Every result is
compared with eager, and graph counts with torch.compile's on the same calls.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterator

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing
from torch import nn

import compile_api

from .conftest import GraphCounter

graph_break = getattr(torch, "_dynamo").graph_break


class Layer(nn.Module):
    """A layer whose forward breaks: its frame is compiled on its own, per call."""

    def __init__(self, n: int = 4, scale: float = 0.5) -> None:
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.lin(x) * self.scale
        if self.training:
            x = x + 1
        graph_break()
        return x.relu()


def run_layers(layers: nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
    for layer in layers:
        x = layer(x)
    return x


@pytest.fixture(autouse=True)
def torch_fresh() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _ours(layers: nn.ModuleList, inputs: list[torch.Tensor]) -> tuple[int, list[torch.Tensor]]:
    counter = GraphCounter()
    compiled = compile_api.compile(run_layers, backend=counter)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a cache size limit's warning (with the switch off)
        results = [compiled(layers, x) for x in inputs]
    return counter.count, results


def _theirs(layers: nn.ModuleList, inputs: list[torch.Tensor]) -> int:
    counter = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(run_layers, backend=counter)
    for x in inputs:
        compiled(layers, x)
    return int(counter.frame_count)


def _check(layers: nn.ModuleList, inputs: list[torch.Tensor]) -> int:
    """Our graph count on ``inputs``, after checking every result against eager."""
    count, results = _ours(layers, inputs)
    for x, got in zip(inputs, results, strict=True):
        torch.testing.assert_close(got, run_layers(layers, x))
    return count


def _stack(n_layers: int, n: int = 4) -> nn.ModuleList:
    torch.manual_seed(0)
    return nn.ModuleList([Layer(n) for _ in range(n_layers)])


@torch.no_grad()
def test_layers_of_one_shape_compile_forward_once_like_torch() -> None:
    """3 layers: torch compiles Layer.forward once (and its resume once); so do we, and 6
    layers compile no more than 3."""
    layers, x = _stack(3), torch.randn(2, 4)
    ours = _check(layers, [x])
    assert ours == _theirs(layers, [x]) == 2
    compile_api.reset()
    assert _check(_stack(6), [x]) == 2


@torch.no_grad()
def test_without_the_switch_each_layer_compiles_its_own_forward() -> None:
    compile_api.config.inline_inbuilt_nn_modules = False
    layers, x = _stack(3), torch.randn(2, 4)
    assert _check(layers, [x]) == 4  # three forwards (one per layer) and the shared resume


@torch.no_grad()
def test_a_layer_of_another_shape_recompiles() -> None:
    torch.manual_seed(0)
    narrow = nn.ModuleList([Layer(4), Layer(4)])
    wide = nn.ModuleList([Layer(8), Layer(8)])
    calls = [(narrow, torch.randn(2, 4)), (wide, torch.randn(2, 8)), (narrow, torch.randn(2, 4))]
    counter = GraphCounter()
    compiled = compile_api.compile(run_layers, backend=counter)
    for layers, x in calls:
        torch.testing.assert_close(compiled(layers, x), run_layers(layers, x))
    theirs = torch._dynamo.testing.CompileCounter()
    reference = torch.compile(run_layers, backend=theirs)
    for layers, x in calls:
        reference(layers, x)
    # forward and resume for 4 wide, then for 8 wide (the input's size changed too)
    assert counter.count == theirs.frame_count == 4


@torch.no_grad()
def test_a_layer_in_eval_mode_recompiles_and_runs_as_eval() -> None:
    layers, x = _stack(3), torch.randn(2, 4)
    layers[1].eval()
    ours = _check(layers, [x])
    assert ours == _theirs(layers, [x]) == 3


@torch.no_grad()
def test_weights_changed_in_place_or_replaced_are_read_on_each_call() -> None:
    layers, x = _stack(3), torch.randn(2, 4)
    counter = GraphCounter()
    compiled = compile_api.compile(run_layers, backend=counter)
    torch.testing.assert_close(compiled(layers, x), run_layers(layers, x))
    layers[1].lin.weight.mul_(2.0)
    torch.testing.assert_close(compiled(layers, x), run_layers(layers, x))
    layers[2].lin.weight = nn.Parameter(torch.randn(4, 4))
    layers[0].scale = 0.5  # the same value: still the same entry
    torch.testing.assert_close(compiled(layers, x), run_layers(layers, x))
    assert counter.count == 2
    layers[0].scale = 3.0  # a float the trace read: guarded by value
    torch.testing.assert_close(compiled(layers, x), run_layers(layers, x))
    assert counter.count == 3


def test_requires_grad_change_recompiles_with_the_right_gradients() -> None:
    layers, x = _stack(2), torch.randn(2, 4)
    compiled = compile_api.compile(run_layers, backend=GraphCounter())
    layers[0].lin.weight.requires_grad_(False)
    compiled(layers, x).sum().backward()
    assert layers[0].lin.weight.grad is None
    expected = copy.deepcopy(layers)
    for p in expected.parameters():
        p.grad = None
    run_layers(expected, x).sum().backward()
    torch.testing.assert_close(layers[1].lin.weight.grad, expected[1].lin.weight.grad)


def test_training_through_the_shared_forward_gives_eagers_gradients() -> None:
    layers, x = _stack(3), torch.randn(2, 4, requires_grad=True)
    reference = copy.deepcopy(layers)
    x_ref = x.detach().clone().requires_grad_(True)
    compiled = compile_api.compile(run_layers, backend="aot_eager")
    compiled(layers, x).square().sum().backward()
    run_layers(reference, x_ref).square().sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    for (name, got), want in zip(layers.named_parameters(), reference.parameters(), strict=True):
        assert got.grad is not None, name
        torch.testing.assert_close(got.grad, want.grad, msg=name)


class Optional(nn.Module):
    """Reads an attribute only some layers have."""

    def __init__(self, extra: bool) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        if extra:
            self.extra = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.lin(x)
        if hasattr(self, "extra"):
            x = self.extra(x)
        graph_break()
        return x


def _run_any(layers: nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
    for layer in layers:
        x = layer(x)
    return x


@torch.no_grad()
def test_hasattr_on_a_shared_module_is_guarded() -> None:
    torch.manual_seed(0)
    layers = nn.ModuleList([Optional(False), Optional(True), Optional(False)])
    x = torch.randn(2, 4)
    counter = GraphCounter()
    compiled = compile_api.compile(_run_any, backend=counter)
    torch.testing.assert_close(compiled(layers, x), _run_any(layers, x))
    assert counter.count == 2  # forward without and with extra (the resume holds no op)


class Hashed(nn.Module):
    """Uses its own hash: the module's identity flows into the trace as a number."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.lin(x) * (hash(self) % 7)
        graph_break()
        return x


@torch.no_grad()
def test_a_module_whose_identity_the_trace_reads_is_pinned() -> None:
    torch.manual_seed(0)
    layers = nn.ModuleList([Hashed() for _ in range(3)])
    x = torch.randn(2, 4)
    compiled = compile_api.compile(_run_any, backend=GraphCounter())
    torch.testing.assert_close(compiled(layers, x), _run_any(layers, x))


def _reads_parameters_from_a_reader(code: object) -> bool:
    """Whether the compiled entry of ``code`` takes parameters from a params_reader (a pinned
    module's frame) instead of reading each at its path (a shared one's)."""
    import evalframe

    entry = evalframe.cache_entries(code)[0]  # type: ignore[arg-type]
    stem = "__strata_p"  # the reader tuple's local (symbolic_vm.codegen)
    return any(n.startswith(stem) and n[len(stem):].isdigit() for n in entry.code.co_varnames)


@torch.no_grad()
def test_compiled_model_or_bound_forward_stays_pinned_and_reads_one_reader() -> None:
    torch.manual_seed(0)
    layer, x = Layer(), torch.randn(2, 4)
    for compiled in (compile_api.compile(layer, backend=GraphCounter()),
                     compile_api.compile(layer.forward, backend=GraphCounter())):
        compile_api.reset()
        torch.testing.assert_close(compiled(x), layer(x))
        assert _reads_parameters_from_a_reader(Layer.forward.__code__)
    compile_api.reset()
    shared = compile_api.compile(run_layers, backend=GraphCounter())
    torch.testing.assert_close(shared(nn.ModuleList([layer]), x), layer(x))
    assert not _reads_parameters_from_a_reader(Layer.forward.__code__)
