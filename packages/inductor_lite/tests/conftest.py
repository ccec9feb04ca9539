"""Shared fixtures: a private kernel cache per test session and an eager comparison helper."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.fx
import torch.utils._pytree as pytree

from inductor_lite import CompiledGraph, InductorConfig, compile_fx


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kernel-cache")


@pytest.fixture
def config(cache_dir: Path) -> InductorConfig:
    # "raise" so that a lowering bug fails the test instead of silently running eagerly
    return InductorConfig(cache_dir=cache_dir, fallback="raise")


def tol(dtype: torch.dtype) -> dict[str, float]:
    if dtype == torch.float16:
        return {"atol": 2e-3, "rtol": 2e-3}
    if dtype == torch.bfloat16:
        return {"atol": 2e-2, "rtol": 2e-2}
    if dtype == torch.float64:
        return {"atol": 1e-10, "rtol": 1e-10}
    return {"atol": 2e-5, "rtol": 2e-5}


def _compile_and_check(
    fn: Callable[..., Any] | torch.nn.Module,
    inputs: Sequence[Any],
    config: InductorConfig,
    *,
    atol: float | None = None,
    rtol: float | None = None,
) -> CompiledGraph:
    """Compile ``fn`` with compile_fx, run it on ``inputs`` and compare with eager."""
    gm = torch.fx.symbolic_trace(fn)
    compiled = compile_fx(gm, list(inputs), config=config)
    assert isinstance(compiled, CompiledGraph)
    with torch.no_grad():
        expected = fn(*inputs)
        actual = compiled(*inputs)
    assert compiled.eager_calls == 0
    exp_flat, exp_spec = pytree.tree_flatten(expected)
    act_flat, act_spec = pytree.tree_flatten(actual)
    assert exp_spec == act_spec
    for k, (a, e) in enumerate(zip(act_flat, exp_flat)):
        if not isinstance(e, torch.Tensor):
            assert a == e
            continue
        assert a.dtype == e.dtype, f"output {k}: {a.dtype} != {e.dtype}"
        assert a.shape == e.shape, f"output {k}: {a.shape} != {e.shape}"
        t = tol(e.dtype)
        torch.testing.assert_close(
            a,
            e,
            atol=atol if atol is not None else t["atol"],
            rtol=rtol if rtol is not None else t["rtol"],
            equal_nan=True,
            msg=lambda m, k=k: f"output {k}: {m}",
        )
    return compiled


CheckFn = Callable[..., CompiledGraph]


@pytest.fixture
def check(config: InductorConfig) -> CheckFn:
    """``check(fn, inputs, **tolerances)``: compile, run and compare with eager."""

    def run(fn: Callable[..., Any], inputs: Sequence[Any], **kw: Any) -> CompiledGraph:
        # the inference-only path returns the CompiledGraph itself, open to inspection
        cfg = dataclasses.replace(kw.pop("config", config), use_aot=False)
        return _compile_and_check(fn, inputs, cfg, **kw)

    return run
