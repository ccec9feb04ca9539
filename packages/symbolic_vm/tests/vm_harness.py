"""Test harness: capture -> identity backend -> run the transformed code -> compare with eager."""

from __future__ import annotations

import copy
import types
from collections.abc import Callable
from typing import Any

import attrs
import torch

from guards import compile_guards
from symbolic_vm import CaptureConfig, CaptureResult, capture, frame_from_call


@attrs.frozen
class Compiled:
    """What running a function through the VM produced."""

    result: CaptureResult
    output: Any
    fn: Callable[..., Any]  # the transformed function (reusable while ``guard`` holds)
    guard: Callable[[dict[str, Any]], bool]

    @property
    def graph_count(self) -> int:
        return len(self.result.graphs)

    def ops(self, index: int = 0) -> list[torch.fx.Node]:
        gm = self.result.graphs[index].gm
        return [n for n in gm.graph.nodes if n.op in ("call_function", "call_method")]

    def op_count(self, index: int = 0) -> int:
        return len(self.ops(index)) if self.result.graphs else 0

    def targets(self, index: int = 0) -> list[object]:
        return [n.target for n in self.ops(index)]

    def placeholders(self, index: int = 0) -> list[str]:
        gm = self.result.graphs[index].gm
        return [n.name for n in gm.graph.nodes if n.op == "placeholder"]


def run_vm(fn: Callable[..., Any], *args: Any, fullgraph: bool = True,
           dynamic: bool | None = None, **kwargs: Any) -> Compiled:
    """Capture ``fn(*args, **kwargs)``, compile its graphs with the identity backend, run it."""
    frame = frame_from_call(fn, args, kwargs)
    result = capture(frame, CaptureConfig(fullgraph=fullgraph, dynamic=dynamic))
    func = fn.__func__ if isinstance(fn, types.MethodType) else fn
    if isinstance(fn, types.MethodType):
        args = (fn.__self__, *args)
    assert isinstance(func, types.FunctionType)
    g = func.__globals__
    for graph in result.graphs:
        g[graph.name] = graph.gm.forward
    g.update(result.globals_to_install)
    check = compile_guards(result.guards, g)
    assert check(dict(frame.f_locals)), "guards fail on the very inputs they were made from"
    new_fn = types.FunctionType(result.code, g, func.__name__, func.__defaults__, func.__closure__)
    new_fn.__kwdefaults__ = func.__kwdefaults__
    return Compiled(result, new_fn(*args, **kwargs), new_fn, check)


def assert_same(actual: Any, expected: Any) -> None:
    """Structural equality with tensors compared by value (dtype and shape included)."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"expected a tensor, got {type(actual)}"
        torch.testing.assert_close(actual, expected, equal_nan=True)
        assert actual.requires_grad == expected.requires_grad
    elif isinstance(expected, (list, tuple)):
        assert type(actual) is type(expected), f"{type(actual)} != {type(expected)}"
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e)
    elif isinstance(expected, dict):
        assert type(actual) is type(expected) and list(actual) == list(expected)
        for key in expected:
            assert_same(actual[key], expected[key])
    elif isinstance(expected, float) and expected != expected:
        assert isinstance(actual, float) and actual != actual
    else:
        assert type(actual) is type(expected) and actual == expected, f"{actual!r} != {expected!r}"


def check(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Compiled:
    """Run ``fn`` eagerly and through the VM on copies of the same inputs; compare everything."""
    eager_args = copy.deepcopy((args, kwargs))
    vm_args = copy.deepcopy((args, kwargs))
    torch.manual_seed(0)
    expected = fn(*eager_args[0], **eager_args[1])
    torch.manual_seed(0)
    compiled = run_vm(fn, *vm_args[0], **vm_args[1])
    assert_same(compiled.output, expected)
    assert_same(vm_args, eager_args)  # in-place changes to inputs match too
    return compiled


def run_with_breaks(fn: Callable[..., Any], *args: Any) -> tuple[Any, list[CaptureResult]]:
    """A miniature compile_api: capture with fullgraph=False, and capture every resume
    function the same way when the residual code calls it. Returns the output and every
    CaptureResult in the order they were made."""
    results: list[CaptureResult] = []

    def compiled(func: types.FunctionType, call_args: tuple[Any, ...]) -> Any:
        frame = frame_from_call(func, call_args)
        result = capture(frame, CaptureConfig(fullgraph=False))
        results.append(result)
        g = func.__globals__
        for graph in result.graphs:
            g[graph.name] = graph.gm.forward
        for name, value in result.globals_to_install.items():
            if name.startswith("__resume_at_") and isinstance(value, types.FunctionType):
                g[name] = _capturing(value)
            else:
                g[name] = value
        assert compile_guards(result.guards, g)(dict(frame.f_locals))
        new = types.FunctionType(result.code, g, func.__name__, func.__defaults__,
                                 func.__closure__)
        new.__kwdefaults__ = func.__kwdefaults__
        return new(*call_args)

    def _capturing(resume: types.FunctionType) -> Callable[..., Any]:
        def call(*call_args: Any) -> Any:
            return compiled(resume, call_args)

        return call

    func = fn.__func__ if isinstance(fn, types.MethodType) else fn
    if isinstance(fn, types.MethodType):
        args = (fn.__self__, *args)
    assert isinstance(func, types.FunctionType)
    return compiled(func, args), results
