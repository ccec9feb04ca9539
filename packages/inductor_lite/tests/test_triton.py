"""The Triton path: on CUDA tensors when a GPU is present, else on CPU tensors through
Triton's interpreter (TRITON_INTERPRET=1). Skipped when triton is not importable.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest
import torch
import torch.nn.functional as F

# the interpreter must be chosen before triton is first imported: its standard library
# (tl.sum, tl.max, ...) is bound to interpreted or compiled form at import
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")
DEV = "cuda" if torch.cuda.is_available() else "cpu"

from inductor_lite import InductorConfig  # noqa: E402
from inductor_lite.triton_runtime import TritonLauncher  # noqa: E402


@pytest.fixture
def tcheck(check: Any, config: InductorConfig, monkeypatch: pytest.MonkeyPatch) -> Any:
    cfg = dataclasses.replace(config, codegen="triton", triton_autotune_cache={})

    def run(fn: Any, inputs: list[Any], **kw: Any) -> Any:
        return check(fn, inputs, config=cfg, **kw)

    run.config = cfg  # type: ignore[attr-defined]
    return run


def test_pointwise_chain_is_one_triton_kernel(tcheck: Any) -> None:
    def chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(torch.relu(x * 2 + y) - 1).exp() / 3

    c = tcheck(chain, [torch.randn(33, 70, device=DEV), torch.randn(70, device=DEV)])
    assert c.kernel_count == 1
    assert "@triton.jit" in c.kernel_source


@pytest.mark.parametrize("width", [100, 5000], ids=["persistent", "looped"])
def test_layer_norm_softmax_rows(width: int, tcheck: Any) -> None:
    w, b = torch.randn(width, device=DEV), torch.randn(width, device=DEV)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.softmax(F.layer_norm(x, (width,), w, b), -1), x.amax(-1)

    c = tcheck(fn, [torch.randn(6, width, device=DEV)], atol=1e-5, rtol=1e-4)
    assert c.kernel_count == 1


def test_scatter_one_index_per_row(tcheck: Any) -> None:
    # cross-entropy's backward: a where over the row's checked target, fused
    def fn(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return torch.full_like(x, 0).scatter(1, t, -1.0) * x.exp()

    x, t = torch.randn(6, 10, device=DEV), torch.randint(0, 10, (6, 1), device=DEV)
    c = tcheck(fn, [x, t], atol=1e-5, rtol=1e-5)
    assert c.kernel_count == 1


def test_column_reduction_views_and_cat(tcheck: Any) -> None:
    def fn(x: torch.Tensor, i: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            x.sum(0),
            x.t() * 2,
            torch.cat([x, x + 1], 1),
            F.embedding(i, x),
            torch.where(x > 0, x, 0.5),
            x.var(1),
        )

    tcheck(
        fn,
        [torch.randn(9, 12, device=DEV), torch.randint(0, 9, (4,), device=DEV)],
        atol=1e-5,
        rtol=1e-5,
    )


def test_nan_propagates_through_triton_max(tcheck: Any) -> None:
    x = torch.randn(4, 40, device=DEV)
    x[2, 7] = float("nan")
    tcheck(lambda x: (x.amax(-1), torch.maximum(x, x * 0)), [x])


def test_sign_of_nan_and_signed_zeros_is_eagers(tcheck: Any) -> None:
    # eager's sign is (0 < x) - (x < 0): 0 for NaN, +0.0 for -0.0 (the bool output compares the
    # sign bit exactly)
    x = torch.tensor([float("nan"), -0.0, 0.0, -2.0, 3.0] * 8, device=DEV)
    tcheck(lambda x: (torch.sign(x), torch.signbit(torch.sign(x * 0))), [x])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_round_is_eagers_half_to_even_with_signed_zeros(dtype: torch.dtype, tcheck: Any) -> None:
    # ties both ways, just below a tie, negatives, zeros of both signs, inf, NaN; the sign bit
    # of the zeros (round(-0.4) is -0.0) is compared exactly through signbit
    values = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 2.6, -2.6, -0.4, -0.0, 0.0, 1e30,
              float("inf"), float("-inf"), float("nan")]  # fmt: skip
    x = torch.tensor(values * 3, device=DEV).to(dtype)
    c = tcheck(lambda x: (torch.round(x), torch.signbit(torch.round(x * 0.5))), [x])
    assert c.kernel_count == 1


@pytest.mark.parametrize("dtype", [torch.float16, torch.int64, torch.bool])
def test_dtypes(dtype: torch.dtype, tcheck: Any) -> None:
    if dtype == torch.bool:
        x = torch.rand(5, 20, device=DEV) > 0.5
        tcheck(lambda x: (x & ~x.flip(0), x.to(torch.float32) * 3), [x])
    elif dtype == torch.int64:
        x = torch.randint(-50, 50, (5, 20), device=DEV)
        tcheck(lambda x: (x * 3 - 1, x.sum(-1), x.amax(0), x > 2), [x])
    else:
        x = torch.randn(5, 20, device=DEV).to(dtype)
        tcheck(lambda x: (x * 2 + 1, torch.softmax(x.float(), -1).half()), [x])


def test_autotuner_times_once_per_kernel_then_reuses(
    tcheck: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    original = TritonLauncher._tune

    def counting(self: TritonLauncher, tensors: Any) -> Any:
        calls.append(self.src.name)
        return original(self, tensors)

    monkeypatch.setattr(TritonLauncher, "_tune", counting)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, -1)

    x = torch.randn(8, 300, device=DEV)
    c = tcheck(fn, [x])
    assert calls == ["kernel0"]
    c(torch.randn(8, 300, device=DEV))
    tcheck(fn, [x])  # a second compile of the same source finds the choice cached
    assert calls == ["kernel0"]
    assert len(tcheck.config.triton_autotune_cache) == 1


def test_block_size_that_fails_to_launch_is_skipped(
    tcheck: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = TritonLauncher._launch
    refused: list[tuple[int, int]] = []

    def picky(self: TritonLauncher, cfg: tuple[int, int], tensors: Any) -> None:
        if cfg[0] == 1:  # pretend the device cannot take single-row programs
            refused.append(cfg)
            raise RuntimeError("out of resources")
        original(self, cfg, tensors)

    monkeypatch.setattr(TritonLauncher, "_launch", picky)
    c = tcheck(lambda x: torch.softmax(x, -1), [torch.randn(8, 1000, device=DEV)])
    assert refused and c.eager_calls == 0


def test_kernels_failing_at_first_launch_run_eagerly_with_a_warning(
    tcheck: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: TritonLauncher, cfg: tuple[int, int], tensors: Any) -> None:
        raise RuntimeError("compilation failed")

    monkeypatch.setattr(TritonLauncher, "_launch", broken)
    fn = lambda x: torch.sigmoid(x) * 2  # noqa: E731
    x = torch.randn(8, 30, device=DEV)
    gm = torch.fx.symbolic_trace(fn)
    from inductor_lite import compile_fx

    c = compile_fx(gm, [x], config=dataclasses.replace(tcheck.config, use_aot=False))
    with pytest.warns(RuntimeWarning, match="first launch"):
        y = c(x)
    torch.testing.assert_close(y, fn(x))
    torch.testing.assert_close(c(x), fn(x))
    assert c.eager_calls == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="direct launches need a real GPU")
def test_direct_launch_after_the_first_call_and_per_alignment(
    tcheck: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from inductor_lite import triton_runtime

    direct: list[int] = []
    original = triton_runtime._DirectLaunch.launch

    def counting(self: Any, grid: int, args: Any) -> None:
        direct.append(grid)
        original(self, grid, args)

    monkeypatch.setattr(triton_runtime._DirectLaunch, "launch", counting)

    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x * 2 + y) - y

    base = torch.randn(4097 * 3, device=DEV)
    aligned = base[: 4096 * 3].view(3, 4096)
    shifted = base[1 : 4096 * 3 + 1].view(3, 4096)  # 4-byte offset: not 16-byte aligned
    y = torch.randn(3, 4096, device=DEV)
    c = tcheck(fn, [aligned, y])
    n = len(direct)
    for x in (aligned, shifted, shifted, aligned):
        torch.testing.assert_close(c(x, y), fn(x, y))
    assert len(direct) > n  # later calls skip triton's JIT entry point
    assert c.eager_calls == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_persistent_row_kernel_keeps_the_normalised_row_in_registers(
    dtype: torch.dtype, tcheck: Any
) -> None:
    w = torch.randn(300, device=DEV).to(dtype)
    b = torch.randn(300, device=DEV).to(dtype)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(F.layer_norm(x, (300,), w, b), -1)

    tol = {"atol": 2e-3, "rtol": 2e-3} if dtype == torch.float16 else {}
    c = tcheck(fn, [torch.randn(2, 5, 300, device=DEV).to(dtype)], **tol)
    assert c.kernel_count == 1
    # the three later reads of the normalised row come from the step that computed it
    assert "debug_barrier" not in c.kernel_source
    assert c.kernel_source.count("= row") >= 2


def test_a_transposed_read_of_a_stored_row_still_goes_through_memory(tcheck: Any) -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.exp(x) * 3 - 1
        return y, (y.t() + 1).sum(-1)

    c = tcheck(fn, [torch.randn(64, 64, device=DEV)])
    assert c.eager_calls == 0


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.mean() + x.amax(),
        lambda x: x.std(),
        lambda x: (x.sum(), x * 2),
        lambda x: x * x[3, 4] + x[0].sum(),
    ],
    ids=["mean_plus_amax", "std", "sum_and_pointwise", "constant_index_loads"],
)
def test_zero_dim_results_and_constant_index_loads_compile(fn: Any, tcheck: Any) -> None:
    # a 0-dim store or a load of one fixed element used scalar pointers with block masks,
    # which Triton refuses at the first launch (the graph then ran eagerly with a warning)
    x = torch.randn(33, 70, device=DEV)
    # a float32 sum of 2,310 terms in another order (Triton's blocks, or the interpreter's
    # numpy) is off by a few ulps of sum(|x|), not of the (possibly cancelled) result
    atol = 16 * torch.finfo(torch.float32).eps * float(x.abs().sum())
    c = tcheck(fn, [x], atol=atol, rtol=1e-5)
    assert c.eager_calls == 0 and c.kernel_count >= 1


def _rebound_inside_loops(source: str) -> set[str]:
    """Names a kernel binds at its top level and binds again inside a later ``for`` loop.

    Compiled triton treats such a name as loop-carried and requires one type for it before and
    inside the loop; a [XBLOCK, 1] tile rebound as [XBLOCK, RBLOCK] fails to compile ("Loop-carried
    variable ... type stays consistent"). The interpreter runs Python and never notices, so the
    source is checked here. Accumulators (``acc*``) are loop-carried on purpose, with one type.
    """
    import ast

    clashes: set[str] = set()
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef):
            continue
        bound: set[str] = set()
        for stmt in fn.body:
            names = {
                t.id
                for node in ast.walk(stmt)
                if isinstance(node, ast.Assign)
                for t in node.targets
                if isinstance(t, ast.Name)
            }
            if isinstance(stmt, ast.For):
                clashes |= {n for n in names & bound if not n.startswith("acc")}
            else:  # a name bound in one loop and again in the next keeps its tile type
                bound |= names
    return clashes


def test_looped_kernel_binds_no_tile_before_a_loop_that_rebinds_it(tcheck: Any) -> None:
    # a full reduction over more than a persistent row, a step on its scalar result outside
    # the loops, then a looped step over the same single row (mse_loss's backward in the
    # training workloads has this shape); compiled triton refused it at every block size on
    # the H100
    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        d = x - y
        return (d * d).mean(), d * 2 + x

    n = 8 * 4196  # 1-D and past PERSISTENT_LIMIT: one row, looped
    c = tcheck(fn, [torch.randn(n, device=DEV), torch.randn(n, device=DEV)], atol=1e-4, rtol=1e-4)
    assert c.kernel_count == 1
    assert "for rb in range" in c.kernel_source
    assert _rebound_inside_loops(c.kernel_source) == set()
