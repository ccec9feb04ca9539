"""Compiled DDP on two GPUs over NCCL: correctness against plain DDP, and step times printed.

Runs only where two CUDA devices and NCCL are present (device kind nvidia-h200-x2); NVLink
multicast stays off (NCCL_NVLS_ENABLE=0 and friends, set here and in every rank). Run it with
``pytest tests/test_ddp_nccl.py -s`` to see the step-time table; times are reported, never
asserted (speed belongs to benchmarks/ddp_step_time.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT / "packages" / "compile_api" / "tests", ROOT / "benchmarks"):
    sys.path.insert(0, str(path))
import test_ddp_support as support  # noqa: E402

os.environ.update(
    NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1"
)

WORLD = 2
STEPS = 4
RUNNER = [("runner", m, b) for m in ("mlp", "transformer") for b in ("eager", "regions")]
COMPILED = [("compile", m, b) for m in ("mlp", "transformer") for b in ("eager", "aot_eager")]

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and torch.cuda.device_count() >= 2 and dist.is_nccl_available()),
    reason="needs 2 CUDA devices and NCCL (device kind nvidia-h200-x2)",
)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    problem = support.capture_problem()
    cases = RUNNER + ([] if problem else COMPILED)
    out = tmp_path_factory.mktemp("ddp_nccl")
    support.spawn_with_timeout(
        support.nccl_worker,
        args=(WORLD, support.free_port(), str(out), cases, STEPS),
        nprocs=WORLD,
        timeout_s=420,
        fault_dir=str(out),
    )
    results = [torch.load(out / f"rank{r}.pt") for r in range(WORLD)]
    yield {"results": results, "capture_problem": problem}


def _case(ranks: dict[str, Any], key: str) -> list[dict[str, Any]]:
    if key.startswith("compile/") and ranks["capture_problem"]:
        pytest.skip(ranks["capture_problem"])
    got = [r[key] for r in ranks["results"]]
    for g in got:
        assert "error" not in g, g.get("error")
    return got


@pytest.mark.parametrize("case", ["/".join(c) for c in RUNNER + COMPILED])
def test_split_ddp_on_gpus_trains_like_plain_ddp(ranks: dict[str, Any], case: str) -> None:
    for got in _case(ranks, case):
        torch.testing.assert_close(got["split_losses"], got["eager_losses"], rtol=1e-5, atol=1e-6)
        for split_p, eager_p in zip(got["split_params"], got["eager_params"], strict=True):
            torch.testing.assert_close(split_p, eager_p, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", ["/".join(c) for c in RUNNER + COMPILED])
def test_split_ddp_on_gpus_runs_one_subgraph_per_bucket(ranks: dict[str, Any], case: str) -> None:
    for got in _case(ranks, case):
        count = got.get("num_subgraphs", sum(got.get("subgraphs_per_graph", [])))
        assert count == got["ddp_buckets"] > 1


def test_step_time_compiled_vs_eager_ddp_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    import ddp_step_time

    configs = "eager,regions-split,regions-whole"
    if not support.capture_problem():
        configs += ",split,unsplit"
    args = ddp_step_time.parse(
        [
            "--device=cuda",
            "--configs=" + configs,
            "--backend=aot_eager",
            "--width=4096",
            "--depth=12",
            "--batch=512",
            "--steps=20",
        ]
    )
    results = ddp_step_time.run(args)
    report = ddp_step_time.table(results, args)
    with capsys.disabled():
        print("\n" + report)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "ddp_step_time_cuda.md").write_text(report + "\n")
    for config, result in results.items():
        assert "error" not in result, f"{config}: {result['error']}"
        torch.testing.assert_close(result["losses"], results["eager"]["losses"], rtol=1e-4, atol=0)
