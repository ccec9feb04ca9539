"""The Triton matmul template and its selection by measurement (``mode="max-autotune"``).

The template's kernels run on CPU tensors through Triton's interpreter (TRITON_INTERPRET=1)
with small tiles, so sizes that are not multiples of a tile, several programs and several K
steps are all exercised; each result is compared with eager's matmul and consumer. The choice
between template and aten is tested with an injected timer (no GPU needed).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sympy
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")
DEV = "cuda" if torch.cuda.is_available() else "cpu"

from inductor_lite import (  # noqa: E402
    CompiledGraph,
    InductorConfig,
    autotune,  # noqa: E402
    compile_fx,
)
from inductor_lite.ir import (  # noqa: E402
    BufferSpec,
    FallbackNode,
    LoweredGraph,
    OutputSpec,
    TensorRef,
)
from inductor_lite.triton_matmul import TemplateMatmul, TileConfig  # noqa: E402

SMALL = TileConfig(16, 16, 16, 4, 1)  # several programs and K steps on tiny shapes


class Timer:
    """Says the template (or aten) is faster; counts what it was asked to time."""

    def __init__(self, template_us: float, aten_us: float) -> None:
        self.us = {"template": template_us, "aten": aten_us}
        self.calls: list[str] = []

    def __call__(self, label: str, fn: Callable[[], object]) -> float:
        self.calls.append(label)
        return self.us["aten" if label == "aten" else "template"] * 1e-6


@pytest.fixture
def mcfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InductorConfig]:
    monkeypatch.setattr(autotune, "configs_for", lambda *shape: [SMALL])
    monkeypatch.setattr(autotune, "_MEMO", {})
    yield InductorConfig(
        cache_dir=tmp_path, fallback="raise", codegen="triton", use_aot=False,
        max_autotune=True, triton_autotune_cache={},
    )  # fmt: skip


def _templates(c: CompiledGraph) -> list[TemplateMatmul]:
    return [i.target for i in c.items if isinstance(getattr(i, "target", None), TemplateMatmul)]


def _compile(fn: Callable[..., Any], inputs: list[torch.Tensor], cfg: InductorConfig) -> Any:
    c = compile_fx(torch.fx.symbolic_trace(fn), inputs, config=cfg)
    assert isinstance(c, CompiledGraph)
    return c


W = torch.randn(37, 29, device=DEV)
B = torch.randn(37, device=DEV)


def _linear_gelu_residual(x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    return F.gelu(F.linear(x, W, B)) + r


def _mm_relu(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ W.t())


def _linear3d_silu(x: torch.Tensor) -> torch.Tensor:
    return F.silu(F.linear(x, W, B)) * 2


def _bmm_sigmoid(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.bmm(x, y).sigmoid()


def _mm_transposed_a(x: torch.Tensor) -> torch.Tensor:
    return x.t() @ W.t()  # A column-major


def _addmm_sliced_bias(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # the bias and A views at an offset, A's rows longer than its K
    return torch.relu(torch.addmm(b[5:42], x[:, 3:], W.t()))


CASES = {
    "addmm_gelu_residual": (
        _linear_gelu_residual,
        lambda: [torch.randn(45, 29), torch.randn(45, 37)],
    ),
    "mm_relu": (_mm_relu, lambda: [torch.randn(33, 29)]),
    "addmm_3d_silu": (_linear3d_silu, lambda: [torch.randn(3, 5, 29)]),
    "bmm_sigmoid": (_bmm_sigmoid, lambda: [torch.randn(2, 20, 29), torch.randn(2, 29, 33)]),
    "mm_column_major_a": (_mm_transposed_a, lambda: [torch.randn(29, 18)]),
    "addmm_sliced_bias": (_addmm_sliced_bias, lambda: [torch.randn(19, 32), torch.randn(50)]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_template_with_fused_consumer_matches_eager(case: str, mcfg: InductorConfig) -> None:
    fn, make = CASES[case]
    inputs = [t.to(DEV) for t in make()]
    autotune_timer = Timer(template_us=1.0, aten_us=2.0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(autotune, "TIMER", autotune_timer)
        c = _compile(fn, inputs, mcfg)
    (tm,) = _templates(c)
    assert tm.cfg == SMALL
    assert f"def {tm.__name__.replace('/', '_')}(" in c.kernel_source  # shown with the kernels
    # the consumer's kernel is gone (fused into the template)
    assert c.kernel_count == 0
    # fp32 accumulation in another order than eager's: a few ulps of each output's magnitude;
    # twice: on a GPU the second call takes the direct launch path
    for _ in range(2):
        torch.testing.assert_close(c(*inputs), fn(*inputs), atol=1e-4, rtol=1e-4)


# triton 3.6's interpreter multiplies bfloat16 tiles wrongly in tl.dot (garbage of 1e10 for a
# 16x16 product; float16 is exact), so bfloat16 runs on a GPU only
_BF16 = pytest.param(
    torch.bfloat16,
    marks=pytest.mark.skipif(DEV == "cpu", reason="interpreter's bfloat16 tl.dot is wrong"),
)


@pytest.mark.parametrize("dtype", [torch.float16, _BF16])
def test_half_template_rounds_like_eager(dtype: torch.dtype, mcfg: InductorConfig) -> None:
    w, b = W.to(dtype), B.to(dtype)

    def fn(x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return F.gelu(F.linear(x, w, b)) + r

    inputs = [
        torch.randn(21, 29, device=DEV, dtype=dtype),
        torch.randn(21, 37, device=DEV, dtype=dtype),
    ]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(autotune, "TIMER", Timer(1.0, 2.0))
        c = _compile(fn, inputs, mcfg)
    assert len(_templates(c)) == 1
    # the float32 sums run in another order than eager's before both round to the half type:
    # a result may move by a unit in its last place (2**-10 / 2**-7 relative, outputs ~10)
    tol = 4e-3 if dtype == torch.float16 else 3e-2
    torch.testing.assert_close(c(*inputs), fn(*inputs), atol=tol * 10, rtol=tol)


def test_aten_kept_when_it_is_faster(mcfg: InductorConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    timer = Timer(template_us=2.0, aten_us=1.0)
    monkeypatch.setattr(autotune, "TIMER", timer)
    inputs = [torch.randn(45, 29, device=DEV), torch.randn(45, 37, device=DEV)]
    c = _compile(_linear_gelu_residual, inputs, mcfg)
    assert _templates(c) == [] and c.kernel_count == 1
    assert sorted(timer.calls) == ["16x16x16/w4/s1", "aten"]
    torch.testing.assert_close(c(*inputs), _linear_gelu_residual(*inputs), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("template_us", [1.0, 0.99, 5.0])
def test_tie_or_noise_keeps_aten(
    template_us: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(autotune, "_MEMO", {})
    cands: dict[str, Callable[[], Callable[[], object]]] = {
        "aten": lambda: lambda: None,
        "t1": lambda: lambda: None,
    }
    assert autotune.select(tmp_path, "k", "mm", cands, Timer(template_us, 1.0)) == "aten"


def test_untimed_aten_keeps_aten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(autotune, "_MEMO", {})

    def broken() -> Callable[[], object]:
        raise RuntimeError("consumer kernel failed")

    cands = {"aten": broken, "t1": lambda: lambda: None}
    assert autotune.select(tmp_path, "k", "mm", cands, Timer(1.0, 2.0)) == "aten"


def test_failing_template_is_no_candidate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(autotune, "_MEMO", {})

    def broken() -> Callable[[], object]:
        raise RuntimeError("out of shared memory")

    cands = {"aten": lambda: lambda: None, "big": broken, "ok": lambda: lambda: None}
    timer = Timer(template_us=1.0, aten_us=2.0)
    assert autotune.select(tmp_path, "k", "mm", cands, timer) == "ok"
    assert "big" not in timer.calls


def test_cached_choice_times_nothing(
    mcfg: InductorConfig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    timer = Timer(template_us=1.0, aten_us=2.0)
    monkeypatch.setattr(autotune, "TIMER", timer)
    inputs = [torch.randn(33, 29, device=DEV)]
    _compile(_mm_relu, inputs, mcfg)
    assert timer.calls
    timer.calls.clear()
    monkeypatch.setattr(autotune, "_MEMO", {})  # a new process: only the file remains
    assert (mcfg.cache_dir / "matmul_choices.json").exists()
    with caplog.at_level(logging.DEBUG, logger="strata.kernel_choices"):
        c = _compile(_mm_relu, inputs, mcfg)
    assert timer.calls == []
    assert len(_templates(c)) == 1
    assert "cached in" in caplog.text and "Triton template 16x16x16/w4/s1" in caplog.text
    torch.testing.assert_close(c(*inputs), _mm_relu(*inputs), atol=1e-4, rtol=1e-4)


def test_choice_is_logged_with_times(
    mcfg: InductorConfig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(autotune, "TIMER", Timer(template_us=3.0, aten_us=5.0))
    with caplog.at_level(logging.DEBUG, logger="strata.kernel_choices"):
        _compile(_mm_relu, [torch.randn(33, 29, device=DEV)], mcfg)
    assert "mm 33x37x29 float32 + kernel0: Triton template 16x16x16/w4/s1" in caplog.text
    assert "16x16x16/w4/s1 3.0, aten 5.0" in caplog.text


def test_default_mode_times_nothing(mcfg: InductorConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    timer = Timer(template_us=1.0, aten_us=2.0)
    monkeypatch.setattr(autotune, "TIMER", timer)
    c = _compile(
        _mm_relu, [torch.randn(33, 29, device=DEV)], dataclasses.replace(mcfg, max_autotune=False)
    )
    assert timer.calls == [] and _templates(c) == []


def test_dynamic_shapes_keep_aten(
    mcfg: InductorConfig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # an mm whose row count is a size symbol, as graph_lowering gives it under dynamic=True
    timer = Timer(template_us=1.0, aten_us=2.0)
    monkeypatch.setattr(autotune, "TIMER", timer)
    s = sympy.Symbol("s0", positive=True, integer=True)
    x = BufferSpec("arg0", (s, 29), (29, 1), torch.float32)
    w = BufferSpec("arg1", (29, 37), (37, 1), torch.float32)
    out = BufferSpec("buf0", (s, 37), (37, 1), torch.float32)
    mm = FallbackNode(
        torch.ops.aten.mm.default,
        tuple(TensorRef(b.name, b.sizes, b.strides, 0, b.dtype) for b in (x, w)),
        (), (out,), False,
    )  # fmt: skip
    graph = LoweredGraph(
        [x, w], {}, {b.name: b for b in (x, w, out)}, [mm],
        [OutputSpec(TensorRef("buf0", out.sizes, out.strides, 0, out.dtype))], torch.device(DEV),
    )  # fmt: skip
    with caplog.at_level(logging.DEBUG, logger="strata.kernel_choices"):
        items, sources = autotune.autotune_matmuls(graph, [mm], mcfg, interpret=DEV == "cpu")
    assert items == [mm] and sources == [] and timer.calls == []
    assert "aten.mm.default: aten (no template: dynamic shapes)" in caplog.text


@pytest.mark.parametrize(
    ("mode", "cudagraphs", "max_autotune"),
    [
        ("max-autotune", True, True),
        ("max-autotune-no-cudagraphs", False, True),
        ("reduce-overhead", True, False),
    ],
)
def test_compile_api_mode_sets_max_autotune(
    mode: str, cudagraphs: bool, max_autotune: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    compile_api = pytest.importorskip("compile_api")
    import compile_api.api as api

    seen: list[dict[str, Any]] = []
    original = api.inductor_with_options

    def spy(options: dict[str, Any]) -> Any:
        seen.append(dict(options))
        return original(options)

    monkeypatch.setattr(api, "inductor_with_options", spy)
    compile_api.compile(_mm_relu, mode=mode)
    assert seen == [{"cudagraphs": cudagraphs, "max_autotune": max_autotune}]
    assert InductorConfig(**seen[0]).max_autotune is max_autotune


def test_reduction_consumer_stays_a_kernel(
    mcfg: InductorConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a row sum is no pointwise epilogue: the template computes the matmul alone
    monkeypatch.setattr(autotune, "TIMER", Timer(template_us=1.0, aten_us=2.0))

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ W.t()).sum(-1)

    inputs = [torch.randn(33, 29, device=DEV)]
    c = _compile(fn, inputs, mcfg)
    assert len(_templates(c)) == 1 and c.kernel_count == 1
    torch.testing.assert_close(c(*inputs), fn(*inputs), atol=1e-4, rtol=1e-4)


def test_template_failure_keeps_aten(
    mcfg: InductorConfig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(autotune, "TIMER", Timer(template_us=1.0, aten_us=2.0))

    def broken(*args: Any) -> Any:
        raise RuntimeError("no device memory")

    monkeypatch.setattr(autotune, "_candidates", broken)
    inputs = [torch.randn(33, 29, device=DEV)]
    with caplog.at_level(logging.DEBUG, logger="strata.kernel_choices"):
        c = _compile(_mm_relu, inputs, mcfg)
    assert _templates(c) == [] and "aten (template failed: no device memory)" in caplog.text
    torch.testing.assert_close(c(*inputs), _mm_relu(*inputs), atol=1e-5, rtol=1e-5)


def _linear_gelu_keeps_result(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = F.linear(x, W, B)
    return F.gelu(y), y  # the pre-activation a training forward saves


def _mm_read_twice(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x @ W.t()
    return torch.relu(y) * 3, y.amax(0)


@pytest.mark.parametrize("fn", [_linear_gelu_keeps_result, _mm_read_twice])
def test_matmul_result_read_elsewhere_is_stored_too(
    fn: Callable[..., Any], mcfg: InductorConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(autotune, "TIMER", Timer(template_us=1.0, aten_us=2.0))
    inputs = [torch.randn(45, 29, device=DEV)]
    c = _compile(fn, inputs, mcfg)
    (tm,) = _templates(c)
    assert tm.keep is not None  # one kernel stores both the matmul and its consumer's result
    for got, want in zip(c(*inputs), fn(*inputs)):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
