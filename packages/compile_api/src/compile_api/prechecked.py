"""Calling a compiled graph without its own input check when the frame's guards made it.

A backend's compiled graph may check on every call that its inputs have the example inputs'
sizes, strides, dtypes and devices (inductor_lite's ``CompiledGraph`` does, and runs the graph
as it came otherwise). The guards of the frame that calls it check the same tensors at the
same sources just before: TENSOR_MATCH, or MODULE_PARAMS for parameters, whose identity it
also checks, so the object the transformed code passes is the one checked. For a model with
a few hundred parameters that second check is a few hundred microseconds per call. Where the
guards prove everything the graph's check would, the graph is called through its
``call_prechecked`` (the protocol aot's runtime uses too, docs/INTERFACES.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

import guards

__all__ = ["prechecked_entry"]


def _tensor_specs(guard_list: Sequence[guards.Guard]) -> dict[guards.Source, guards.TensorSpec]:
    """Each source a TENSOR_MATCH (alone or inside a MODULE_PARAMS) checks -> its spec."""
    specs: dict[guards.Source, guards.TensorSpec] = {}
    for guard in guard_list:
        if isinstance(guard, guards.TensorMatch) and guard.source is not None:
            specs[guard.source] = guard.spec
        elif isinstance(guard, guards.ModuleParams):
            for step in guard.parameters:
                if step.match is not None:
                    specs[step.source] = step.match.spec
    return specs


def _pins(spec: guards.TensorSpec, example: torch.Tensor) -> bool:
    """The spec fixes every property of ``example`` a compiled graph's check compares."""
    return (
        spec.layout == torch.strided
        and spec.strides is not None
        and spec.dtype == example.dtype
        and spec.device == example.device
        and all(type(s) is int for s in spec.sizes)
        and all(type(s) is int for s in spec.strides)
        and spec.sizes == tuple(example.shape)
        and spec.strides == tuple(example.stride())
    )


def _grad_pinned_off(guard_list: Sequence[guards.Guard]) -> bool:
    return any(
        isinstance(g, guards.GlobalState) and not g.snapshot.grad_enabled for g in guard_list
    )


def prechecked_entry(
    compiled: Callable[..., Any],
    input_sources: Sequence[guards.Source],
    example_inputs: Sequence[object],
    guard_list: Sequence[guards.Guard],
) -> Callable[..., Any] | None:
    """``compiled.call_prechecked`` when the guards prove what it would check, else None.

    Proven means: every input is a tensor read from a source whose TENSOR_MATCH fixes its
    example's sizes, strides, dtype and device (no dynamic dims), and no call can need grad
    (grad mode guarded off, or no input requiring grad, which TENSOR_MATCH checks).
    """
    call = getattr(compiled, "call_prechecked", None)
    if call is None or not callable(call) or len(input_sources) != len(example_inputs):
        return None
    if not example_inputs:
        return None
    specs = _tensor_specs(guard_list)
    for source, example in zip(input_sources, example_inputs, strict=True):
        spec = specs.get(source)
        if not isinstance(example, torch.Tensor) or spec is None or not _pins(spec, example):
            return None
    if not _grad_pinned_off(guard_list) and any(specs[s].requires_grad for s in input_sources):
        return None
    return call  # type: ignore[no-any-return]
