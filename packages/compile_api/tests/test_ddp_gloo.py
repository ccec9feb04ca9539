"""Two gloo ranks on 127.0.0.1: DDP over the split backend trains exactly like plain DDP.

The graphs are FX traces with the parameters lifted to inputs (how symbolic_vm presents a frame),
compiled during DDP's forward through ``maybe_wrap_for_ddp`` -- the same path the frame compiler
takes; tests/test_ddp_e2e.py runs the whole ``compile_api.compile`` path.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_ddp_support as support  # noqa: E402

WORLD = 2
STEPS = 4
CASES = [(m, b) for m in ("mlp", "transformer") for b in ("eager", "regions")]

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed unavailable")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("ddp_gloo")
    # both ranks run every case in one spawn: starting processes costs more than the training
    support.spawn_with_timeout(
        support.gloo_worker,
        args=(WORLD, support.free_port(), str(out), CASES, STEPS),
        nprocs=WORLD,
        timeout_s=240,
        fault_dir=str(out),
    )
    yield [torch.load(Path(out) / f"rank{r}.pt") for r in range(WORLD)]


@pytest.mark.parametrize(("model", "backend"), CASES)
def test_split_ddp_losses_equal_plain_ddp(
    ranks: list[dict[str, Any]], model: str, backend: str
) -> None:
    for result in ranks:
        got = result[f"{model}/{backend}"]
        assert "error" not in got, got.get("error")
        assert len(got["split_losses"]) == STEPS
        assert got["split_losses"] == got["eager_losses"]


@pytest.mark.parametrize(("model", "backend"), CASES)
def test_split_ddp_parameters_equal_plain_ddp_on_every_rank(
    ranks: list[dict[str, Any]], model: str, backend: str
) -> None:
    assert all("error" not in r[f"{model}/{backend}"] for r in ranks)
    reference = ranks[0][f"{model}/{backend}"]["eager_params"]
    for result in ranks:
        got = result[f"{model}/{backend}"]
        for split_p, eager_p, rank0_p in zip(
            got["split_params"], got["eager_params"], reference, strict=True
        ):
            torch.testing.assert_close(split_p, eager_p, rtol=0, atol=0)
            torch.testing.assert_close(eager_p, rank0_p, rtol=0, atol=0)


@pytest.mark.parametrize(("model", "backend"), CASES)
def test_subgraph_count_equals_ddp_bucket_count(
    ranks: list[dict[str, Any]], model: str, backend: str
) -> None:
    for result in ranks:
        got = result[f"{model}/{backend}"]
        assert "error" not in got, got.get("error")
        assert got["num_subgraphs"] > 1
        assert got["num_subgraphs"] == got["ddp_buckets"] == got["split_ddp_buckets"]


def test_hung_ranks_are_killed_at_the_deadline() -> None:
    import time

    start = time.monotonic()
    with pytest.raises(TimeoutError, match="did not finish"):
        support.spawn_with_timeout(support.sleeping_worker, args=(120.0,), nprocs=2, timeout_s=3)
    assert time.monotonic() - start < 60
