"""Step time of DistributedDataParallel training: eager DDP vs compiled DDP, split and unsplit.

``python benchmarks/ddp_step_time.py --help``. Starts ``--world`` processes (gloo on CPU, NCCL on
CUDA, one GPU a rank), trains the same MLP under each configuration from one seed, and prints a
Markdown table of the median step time (the slowest rank's median), plus a JSON file.

Configurations (``--configs``):
  eager          plain DDP, no compilation
  split          compile_api.compile(DDP(model)), graphs split at bucket boundaries (optimize_ddp)
  unsplit        the same with compile_api.config.optimize_ddp = False: one compiled region
  regions-split  the model's FX graph (parameters lifted to inputs) run through the DDP splitter
                 with a backend that makes each subgraph one autograd.Function, as aot does
  regions-whole  the same graph as one autograd.Function (what the split avoids)
The regions-* pair needs no frame capture, so it measures the overlap the split buys even where
compile_api.compile cannot capture. Every configuration's losses are checked against eager's.

On a GPU machine keep NVLink multicast off (KINDS.md): this script sets NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 for itself and its ranks.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SUPPORT = ROOT / "packages" / "compile_api" / "tests"

SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
CONFIGS = ("eager", "split", "unsplit", "regions-split", "regions-whole")


def _setup_paths() -> None:
    os.environ.update(SAFE_ENV)
    for path in (str(SUPPORT), str(HERE)):
        if path not in sys.path:
            sys.path.insert(0, path)


def _build(config: str, args: argparse.Namespace, device: Any) -> tuple[Any, Any]:
    """(model to train, the inner module whose parameters it trains)."""
    import test_ddp_support as support
    import torch
    from torch import nn

    torch.manual_seed(0)
    inner = support.MLP(width=args.width, depth=args.depth).to(device)
    ids = [device.index] if device.type == "cuda" else None
    cap = {"bucket_cap_mb": args.bucket_cap_mb} if args.bucket_cap_mb else {}
    if config.startswith("regions"):
        runner = support.TracedRunner(
            inner,
            support.RegionBackend(),
            optimize_ddp=config == "regions-split",
        )
        return nn.parallel.DistributedDataParallel(runner, device_ids=ids, **cap), inner
    ddp = nn.parallel.DistributedDataParallel(inner, device_ids=ids, **cap)
    if config == "eager":
        return ddp, inner
    import compile_api

    compile_api.reset()
    compile_api.config.optimize_ddp = config == "split"
    compile_api.config.suppress_errors = False
    return compile_api.compile(ddp, backend=args.backend), inner


def _time_config(config: str, args: argparse.Namespace, rank: int, device: Any) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    model, inner = _build(config, args, device)
    opt = torch.optim.SGD(inner.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, args.width, generator=g).to(device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    losses: list[float] = []
    times: list[float] = []
    for step in range(args.warmup + args.steps):
        sync()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        sync()
        elapsed = time.perf_counter() - start
        losses.append(loss.item())
        if step == 0:
            first = elapsed
        if step >= args.warmup:
            times.append(elapsed)
    median = torch.tensor([statistics.median(times)], dtype=torch.float64, device=device)
    dist.all_reduce(median, op=dist.ReduceOp.MAX)  # a step ends when the slowest rank ends
    subgraphs: list[int] = []
    if config in ("split", "unsplit"):
        import test_ddp_support as support

        subgraphs = [s.num_subgraphs for s in support.installed_splits(support.MLP.__module__)]
    elif config.startswith("regions"):
        subgraphs = [getattr(model.module.compiled, "num_subgraphs", 1)]
    return {
        "median_ms": median.item() * 1e3,
        "first_step_ms": first * 1e3,
        "losses": losses,
        "subgraphs": subgraphs,
    }


def _worker(rank: int, args: argparse.Namespace, port: int, out: str) -> None:
    _setup_paths()
    import torch
    import torch.distributed as dist

    cuda = args.device == "cuda"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(args.threads)
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=args.world,
        timeout=datetime.timedelta(seconds=120),
    )
    try:
        results: dict[str, Any] = {}
        for config in args.configs:
            try:
                results[config] = _time_config(config, args, rank, device)
            except Exception as err:  # one failing configuration must not hide the others
                results[config] = {"error": f"{type(err).__name__}: {err}"}
            dist.barrier()
        if rank == 0:
            Path(out).write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the ranks, wait for them (with a deadline), return rank 0's results."""
    _setup_paths()
    import test_ddp_support as support

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "results.json")
        support.spawn_with_timeout(
            _worker, (args, support.free_port(), out), nprocs=args.world, timeout_s=args.timeout
        )
        results: dict[str, Any] = json.loads(Path(out).read_text())
    return results


def table(results: dict[str, Any], args: argparse.Namespace) -> str:
    eager = results.get("eager", {})
    lines = [
        f"DDP step time, {args.world} ranks on {args.device}, MLP width {args.width} depth "
        f"{args.depth} batch {args.batch}, bucket_cap_mb {args.bucket_cap_mb or 'default'}, "
        f"backend {args.backend}, median of {args.steps} steps after {args.warmup} warm-up",
        "",
        "| config | median step (ms) | vs eager DDP | first step (ms) | subgraphs "
        "| losses = eager |",
        "|---|---|---|---|---|---|",
    ]
    for config, r in results.items():
        if "error" in r:
            lines.append(f"| {config} | FAILED: {r['error']} | | | | |")
            continue
        speed = f"{eager['median_ms'] / r['median_ms']:.2f}x" if "median_ms" in eager else "n/a"
        same = "n/a"
        if "losses" in eager:
            worst = max(
                abs(a - b) / max(abs(b), 1e-12) for a, b in zip(r["losses"], eager["losses"])
            )
            same = "yes" if worst <= 1e-4 else f"NO (rel. diff {worst:.1e})"
        lines.append(
            f"| {config} | {r['median_ms']:.2f} | {speed} | {r['first_step_ms']:.0f} | "
            f"{r['subgraphs'] or '-'} | {same} |"
        )
    return "\n".join(lines)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--world", type=int, default=2)
    p.add_argument(
        "--configs", default=",".join(CONFIGS), help="comma-separated, of " + ", ".join(CONFIGS)
    )
    p.add_argument("--backend", default="aot_eager", help="compile_api backend for split/unsplit")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--bucket-cap-mb", type=float, default=0.0, help="0: DDP's default (25)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank on CPU")
    p.add_argument("--timeout", type=float, default=540.0)
    p.add_argument("--json", default="", help="also write the results here")
    args = p.parse_args(argv)
    args.configs = [c for c in args.configs.split(",") if c]
    unknown = set(args.configs) - set(CONFIGS)
    if unknown:
        p.error(f"unknown configs {sorted(unknown)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    results = run(args)
    print(table(results, args))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
