"""Shared fixtures: a private kernel cache per test session and an eager comparison helper."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
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


# ---------------------------------------------------------------- dynamic shapes

SIZES = (2, 3, 17, 1000, 5)


class Recorder:
    """The backend under test plus every graph it compiled (forward and backward)."""

    def __init__(self, config: InductorConfig) -> None:
        self.config = config
        self.graphs: list[Any] = []
        self.captures = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        self.captures += 1
        return compile_fx(gm, list(example_inputs), config=self.config)

    def compiled(self) -> list[CompiledGraph]:
        assert self.graphs, "nothing compiled"
        for g in self.graphs:
            assert isinstance(g, CompiledGraph), f"ran eagerly: {getattr(g, 'reason', g)}"
        return self.graphs

    def sweep(
        self,
        fn: Callable[..., Any],
        make: Callable[[int], tuple[Any, ...]],
        *,
        dynamic: bool | None = True,
        sizes: tuple[int, ...] = SIZES,
        atol: float = 1e-5,
    ) -> None:
        """Compile ``fn`` through compile_api with this backend; compare with eager per size."""
        import compile_api

        compiled = compile_api.compile(fn, backend=self, dynamic=dynamic)
        for n in sizes:
            args = make(n)
            torch.testing.assert_close(compiled(*args), fn(*args), atol=atol, rtol=1e-5)

    def assert_generated_code_ran(self, symbolic: bool = True) -> None:
        graphs = self.compiled()
        assert sum(g.kernel_count for g in graphs) > 0
        for g in graphs:
            assert g.eager_calls == 0, g.wrapper_source
            if symbolic:
                assert g.lowered.symbols, "compiled for static sizes only"


def _recording(config: InductorConfig, monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    # compile_api is the capture layer above us (skipped where it is not installed, as on a
    # device machine given only this package and aot)
    compile_api = pytest.importorskip("compile_api")
    import inductor_lite.compile as compile_module

    rec = Recorder(config)
    original = compile_module.compile_aten_graph

    def spy(gm: torch.fx.GraphModule, inputs: Any, *, config: Any = None) -> Any:
        out = original(gm, inputs, config=config)
        rec.graphs.append(out)
        return out

    monkeypatch.setattr(compile_module, "compile_aten_graph", spy)
    inference = compile_module._compile_for_inference

    def spy_inference(gm: torch.fx.GraphModule, inputs: Any, config: Any) -> Any:
        out = inference(gm, inputs, config)
        if out is not None:  # compiled without aot (no_grad, no input written)
            rec.graphs.append(out)
        return out

    monkeypatch.setattr(compile_module, "_compile_for_inference", spy_inference)
    saved = compile_api.config.suppress_errors
    compile_api.config.suppress_errors = False
    yield rec
    compile_api.config.suppress_errors = saved


@pytest.fixture
def recorder(config: InductorConfig, monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    """A compile_api backend (compile_fx) that keeps every graph aot handed to us."""
    yield from _recording(config, monkeypatch)


@pytest.fixture
def triton_recorder(config: InductorConfig, monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    """As ``recorder``, generating Triton (on CPU tensors: under TRITON_INTERPRET=1)."""
    cfg = dataclasses.replace(config, codegen="triton", triton_autotune_cache={})
    yield from _recording(cfg, monkeypatch)
