"""Compiled DDP as users write it, on 2 gloo ranks: ``compile(DDP(model))`` and
``DDP(compile(model))`` capture the wrapped module's forward (DDP's own forward, with its profiler
range, runs eagerly as under torch.compile) and train exactly like eager DDP.

The model is an ``nn.Sequential`` (a forward torch defines): compile(DDP(model)) used to capture
0 graphs (DDP's forward broke at record_function, and torch-defined forwards below it were
skipped as library code).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

SUPPORT = Path(__file__).resolve().parents[1] / "packages" / "compile_api" / "tests"
sys.path.insert(0, str(SUPPORT))
import test_ddp_support as support  # noqa: E402

STEPS = 3
FORMS = ("compile(DDP)", "DDP(compile)")
# nccl runs the same check on 2 GPUs (the device machine): STRATA_DDP_FORMS_BACKEND=nccl.
DIST_BACKEND = os.environ.get("STRATA_DDP_FORMS_BACKEND", "gloo")


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4)
    )


def _device(rank: int) -> torch.device:
    return torch.device("cuda", rank) if DIST_BACKEND == "nccl" else torch.device("cpu")


def _train(model: nn.Module, rank: int) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(STEPS):
        g = torch.Generator().manual_seed(100 * step + rank)
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        x, y = x.to(_device(rank)), y.to(_device(rank))
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def _worker(rank: int, world: int, port: int, out_dir: str) -> None:
    if DIST_BACKEND == "nccl":
        torch.cuda.set_device(rank)
    with support.rank_group(DIST_BACKEND, rank, world, port, out_dir):
        import compile_api
        from compile_api.state import state

        torch.set_num_threads(1)
        cap = 32 * 33 * 4 / 2**20  # about one Linear per bucket
        eager_model = _model().to(_device(rank))
        eager = _train(nn.parallel.DistributedDataParallel(eager_model, bucket_cap_mb=cap), rank)
        results = {}
        for form in FORMS:
            compile_api.reset()
            graphs: list[object] = []

            def backend(gm: torch.fx.GraphModule, example_inputs: object) -> object:
                graphs.append(gm)
                return gm.forward

            model = _model().to(_device(rank))
            if form == "compile(DDP)":
                wrapped = compile_api.compile(
                    nn.parallel.DistributedDataParallel(model, bucket_cap_mb=cap), backend=backend
                )
            else:
                wrapped = nn.parallel.DistributedDataParallel(
                    compile_api.compile(model, backend=backend), bucket_cap_mb=cap
                )
            losses = _train(wrapped, rank)
            results[form] = {
                "losses": losses,
                "eager_losses": eager,
                "params_equal": all(
                    torch.allclose(a, b, rtol=1e-5, atol=1e-6)
                    for a, b in zip(model.parameters(), eager_model.parameters(), strict=True)
                ),
                "graphs": len(graphs),
                "breaks": [b.reason for r in state.records for b in r.breaks],
            }
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, object]]:
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    if DIST_BACKEND == "nccl" and torch.cuda.device_count() < 2:
        pytest.skip("nccl needs 2 GPUs")
    out = tmp_path_factory.mktemp("ddp_forms")
    support.spawn_with_timeout(
        _worker,
        args=(2, support.free_port(), str(out)),
        nprocs=2,
        timeout_s=300,
        fault_dir=str(out),
    )
    return [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.parametrize("form", FORMS)
def test_compiled_ddp_trains_like_eager_ddp_and_captures_the_forward(
    results: list[dict[str, dict[str, object]]], form: str
) -> None:
    for rank_results in results:
        r = rank_results[form]
        assert r["params_equal"]
        torch.testing.assert_close(r["losses"], r["eager_losses"], rtol=1e-5, atol=1e-6)
        assert r["graphs"] >= 1, "the wrapped module's forward was not captured"
        assert not [b for b in r["breaks"] if "record_function" in b or "profiler" in b]
