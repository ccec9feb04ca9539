"""Dynamic shapes at the VM level: ints as SymInt graph inputs, guards that know every
placeholder symbol's source, static parameters under dynamic=True.

Each test captures once, then runs the transformed code on a sweep of other values wherever the
guards accept them and compares with eager; where the guards refuse, that is checked too.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from typing import Any

import pytest
import torch

from guards import compile_guards
from symbolic_vm import CaptureConfig, CaptureResult, capture, frame_from_call


class Captured:
    """One capture of ``fn`` on some arguments: its graphs, guards and transformed function."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], config: CaptureConfig):
        frame = frame_from_call(fn, args)
        self.result: CaptureResult = capture(frame, config)
        assert isinstance(fn, types.FunctionType)
        g = fn.__globals__
        for graph in self.result.graphs:
            g[graph.name] = graph.gm.forward
        g.update(self.result.globals_to_install)
        self.guards = compile_guards(self.result.guards, g)
        self.fn = types.FunctionType(self.result.code, g, fn.__name__, fn.__defaults__,
                                     fn.__closure__)
        self.eager = fn
        self.params = list(frame.f_locals)
        assert self.accepts(*args), "guards fail on the very inputs they were made from"

    def accepts(self, *args: Any) -> bool:
        return bool(self.guards(dict(zip(self.params, args, strict=True))))

    def same(self, *args: Any) -> None:
        torch.testing.assert_close(self.fn(*args), self.eager(*args))

    def placeholders(self) -> list[torch.fx.Node]:
        (graph,) = self.result.graphs
        return [n for n in graph.gm.graph.nodes if n.op == "placeholder"]

    @property
    def text(self) -> str:
        return self.guards.text


def sym_placeholders(cap: Captured) -> list[str]:
    return [n.name for n in cap.placeholders() if isinstance(n.meta["example_value"], torch.SymInt)]


def scale(x: torch.Tensor, n: int) -> torch.Tensor:
    return x * n + n


SWEEP = (-5, -1, 0, 1, 2, 3, 17, 1000)


@pytest.mark.parametrize("first", [2, 7, -3])
def test_named_int_is_a_symint_input_and_one_capture_serves_every_int(first: int) -> None:
    x = torch.randn(4)
    cap = Captured(scale, (x, first), CaptureConfig(dynamic_ints=frozenset({"L['n']"})))
    assert sym_placeholders(cap) == ["n"]
    assert "TYPE_MATCH: L['n'] type=int" in cap.text and "CONSTANT_MATCH" not in cap.text
    for n in SWEEP:
        assert cap.accepts(x, n)
        cap.same(x, n)
    assert not cap.accepts(x, 2.0), "a float is not the int the graph was traced for"
    assert not cap.accepts(x, True), "bool is not int here"


def test_unnamed_int_stays_a_constant_with_automatic_dynamic() -> None:
    x = torch.randn(4)
    cap = Captured(scale, (x, 3), CaptureConfig())
    assert sym_placeholders(cap) == []
    assert "CONSTANT_MATCH: L['n'] == 3" in cap.text
    assert not cap.accepts(x, 4)


@pytest.mark.parametrize("first", [2, 5])
def test_dynamic_true_makes_ints_symbolic_from_the_start(first: int) -> None:
    x = torch.randn(4)
    cap = Captured(scale, (x, first), CaptureConfig(dynamic=True))
    assert sym_placeholders(cap) == ["n"]
    for n in SWEEP:
        assert cap.accepts(x, n)
        cap.same(x, n)


@pytest.mark.parametrize("special", [0, 1])
def test_dynamic_true_makes_zero_and_one_symbolic_too(special: int) -> None:
    # Unlike sizes, int inputs are not 0/1-specialised (torch.compile 2.13 compiles once for
    # n = 0, 1, 2, 3 with dynamic=True): the graph must be right for every int.
    x = torch.randn(4)
    cap = Captured(scale, (x, special), CaptureConfig(dynamic=True))
    assert sym_placeholders(cap) == ["n"]
    assert "CONSTANT_MATCH" not in cap.text
    for n in SWEEP:
        assert cap.accepts(x, n)
        cap.same(x, n)


def test_dynamic_false_never_makes_an_int_symbolic() -> None:
    x = torch.randn(4)
    cap = Captured(scale, (x, 3), CaptureConfig(dynamic=False, dynamic_ints=frozenset({"L['n']"})))
    assert sym_placeholders(cap) == []


def branch(x: torch.Tensor, n: int) -> torch.Tensor:
    if n > 3:
        return x * n
    return x - n


def test_branch_on_a_symbolic_int_is_guarded_both_ways() -> None:
    x = torch.randn(4)
    cap = Captured(branch, (x, 5), CaptureConfig(dynamic=True))
    for n in (4, 5, 9, 100):
        assert cap.accepts(x, n)
        cap.same(x, n)
    for n in (3, 2, -7):
        assert not cap.accepts(x, n), f"n={n} takes the other branch"


def loop(x: torch.Tensor, n: int) -> torch.Tensor:
    for _ in range(n):
        x = x + 1
    return x


def test_int_specialised_by_range_is_guarded_on_its_value() -> None:
    x = torch.randn(4)
    cap = Captured(loop, (x, 3), CaptureConfig(dynamic=True))
    assert cap.accepts(x, 3)
    cap.same(x, 3)
    for n in (2, 4, 5):
        assert not cap.accepts(x, n), f"the graph adds 1 three times; n={n} must not run it"


def first_of(x: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    return x.reshape(sizes[0], -1) + sizes[1]


def test_ints_inside_a_list_argument_are_symbolic_under_dynamic_true() -> None:
    x = torch.randn(12)
    cap = Captured(first_of, (x, [3, 5]), CaptureConfig(dynamic=True))
    assert len(sym_placeholders(cap)) == 2
    for sizes in ([2, 0], [4, -1], [6, 9], [3, 7]):
        assert cap.accepts(x, sizes)
        cap.same(x, sizes)
    assert not cap.accepts(x, [5, 1]), "12 is not a multiple of 5: the reshape's guard fails"
    assert not cap.accepts(x, [12, 1]), "a size-1 result dim: traced as >= 2, refused"


LIMIT = 4


def times_limit(x: torch.Tensor) -> torch.Tensor:
    return x * LIMIT


def test_global_int_stays_a_constant_under_dynamic_true() -> None:
    x = torch.randn(4)
    cap = Captured(times_limit, (x,), CaptureConfig(dynamic=True))
    assert sym_placeholders(cap) == []
    assert "CONSTANT_MATCH: G['LIMIT'] == 4" in cap.text


def add_pair(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b * 2


def test_failed_broadcast_guards_every_input_whose_symbol_the_shape_env_mentions() -> None:
    # b * 2 is captured, then a + (b * 2) fails on fakes (4 vs 5): the graph breaks there, a is
    # not in the graph, yet the ShapeEnv's facts name a's size: the guards must read it.
    a, b = torch.randn(4), torch.randn(5)
    cap = Captured(add_pair, (a, b), CaptureConfig(dynamic=True))
    assert len(cap.result.breaks) == 1
    assert "TENSOR_MATCH: L['a']" in cap.text, cap.text
    with pytest.raises(RuntimeError, match="size of tensor a"):
        cap.fn(a, b)
    assert cap.accepts(torch.randn(7), torch.randn(9))
    assert not cap.accepts(torch.randn(3), torch.randn(3)), "equal sizes broadcast: not this entry"


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.fc2 = torch.nn.Linear(8, 2)
        self.register_buffer("scale", torch.full((2,), 3.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x))) * self.scale


def test_parameters_and_buffers_keep_static_sizes_under_dynamic_true() -> None:
    model = Mlp()
    forward = Mlp.forward
    x = torch.randn(5, 6)
    cap = Captured(forward, (model, x), CaptureConfig(dynamic=True))
    inputs = {n.name: n.meta["example_value"] for n in cap.placeholders()}
    symbolic = {name for name, v in inputs.items() if any(isinstance(s, torch.SymInt)
                                                          for s in v.shape)}
    assert symbolic == {"x"}, inputs
    assert "MODULE_PARAMS: L['self']" in cap.text
    own = [line for line in cap.text.splitlines() if line.startswith("TENSOR_MATCH")]
    assert not any("_parameters" in line for line in own), own
    for n in (2, 3, 9, 64):
        y = torch.randn(n, 6)
        assert cap.accepts(model, y)
        cap.same(model, y)
    assert not cap.accepts(model, torch.randn(4, 7))
    other = Mlp()
    other.fc1 = torch.nn.Linear(6, 8, bias=False)
    assert not cap.accepts(other, torch.randn(4, 6)), "another parameter set: MODULE_PARAMS"


class Config:
    def __init__(self, k: int) -> None:
        self.k = k


def scaled_by_config(x: torch.Tensor, cfg: Config) -> torch.Tensor:
    return x * cfg.k


def test_int_field_of_a_plain_object_is_symbolic_under_dynamic_true() -> None:
    x = torch.randn(4)
    cap = Captured(scaled_by_config, (x, Config(3)), CaptureConfig(dynamic=True))
    assert sym_placeholders(cap) == ["l_cfg_k"]
    assert "TYPE_MATCH: L['cfg'].k type=int" in cap.text
    for k in SWEEP:
        assert cap.accepts(x, Config(k))
        cap.same(x, Config(k))


def _float_of(x: torch.Tensor, n: int) -> torch.Tensor:
    return x * float(n) + math.sqrt(n * n)


def _int_of_float(x: torch.Tensor, n: int) -> torch.Tensor:
    return x[: int(n * 1.5)] * 2


def _tensor_of(x: torch.Tensor, n: int) -> tuple[torch.Tensor, ...]:
    return (
        x + torch.tensor(n),
        torch.tensor([n, 2]) * 3,
        torch.tensor(n * 0.5) + x,
        torch.tensor(n, dtype=torch.float64),
        x.new_tensor([n, 3]),
        x.new_tensor(n, dtype=torch.int32),
    )


@pytest.mark.parametrize("fn", [_float_of, _int_of_float, _tensor_of], ids=lambda f: f.__name__)
def test_numeric_builtins_and_torch_tensor_keep_a_symbolic_int_symbolic(
    fn: Callable[..., Any],
) -> None:
    x = torch.randn(30)
    cap = Captured(fn, (x, 4), CaptureConfig(dynamic_ints=frozenset({"L['n']"})))
    assert sym_placeholders(cap) == ["n"]
    assert "CONSTANT_MATCH" not in cap.text, cap.text
    for n in (2, 3, 4, 7, 17):
        assert cap.accepts(x, n)
        eager = fn(x, n)
        got = cap.fn(x, n)
        for a, b in zip(got if isinstance(got, tuple) else (got,),
                        eager if isinstance(eager, tuple) else (eager,), strict=True):
            assert a.dtype == b.dtype
            torch.testing.assert_close(a, b)
