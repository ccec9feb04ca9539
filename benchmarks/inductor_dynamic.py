"""inductor_lite with dynamic shapes: one symbolic compile against per-size static compiles.

Each workload is compiled through compile_api with our ``compile_fx`` as the backend, once
with ``dynamic=True`` (one graph whose kernels take the sizes as arguments) and once with
``dynamic=False`` (a graph per size, sizes as literals), and run beside eager at several
sizes. Every result is checked against eager first. Timing: the median over ``--reps``
interleaved samples (order rotated) of this process's CPU time, torch and the kernels on one thread.

    .venv/bin/python benchmarks/inductor_dynamic.py --reps 30
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import compile_api
from inductor_lite import InductorConfig, compile_fx


def pointwise_chain(x: torch.Tensor) -> torch.Tensor:
    y = torch.sigmoid(x * 1.5 + 0.25)
    y = torch.relu(y * x - 0.1) + torch.tanh(x)
    return y * y + x


def layer_norm_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(F.layer_norm(x, x.shape[-1:]), dim=-1)


WORKLOADS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "pointwise_chain": pointwise_chain,
    "layer_norm_softmax": layer_norm_softmax,
}
SIZES = ((64, 1024), (512, 1024), (4096, 1024), (1000, 777))


def _backend(config: InductorConfig) -> Callable[..., Any]:
    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        return compile_fx(gm, list(example_inputs), config=config)

    return backend


def _sample(fn: Callable[..., Any], x: torch.Tensor) -> float:
    t = time.process_time()
    fn(x)
    return time.process_time() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    opts = parser.parse_args()
    torch.set_num_threads(1)
    config = InductorConfig(num_threads=1, fallback="raise")
    compile_api.config.suppress_errors = False
    warnings.simplefilter("error", RuntimeWarning)  # an eager fallback would void the figures
    print(
        f"torch {torch.__version__}, 1 thread, median of {opts.reps} interleaved samples "
        "(process CPU time)"
    )
    print(
        f"{'workload':20s} {'size':>10s} {'eager ms':>9s} {'static ms':>10s} "
        f"{'dynamic ms':>11s} {'dyn/static':>10s} {'eager/dyn':>10s}"
    )
    for name, fn in WORKLOADS.items():
        dynamic = compile_api.compile(fn, backend=_backend(config), dynamic=True)
        static = compile_api.compile(fn, backend=_backend(config), dynamic=False)
        for rows, cols in SIZES:
            x = torch.randn(rows, cols)
            with torch.no_grad():
                for compiled in (dynamic, static):
                    torch.testing.assert_close(compiled(x), fn(x), atol=1e-5, rtol=1e-5)
                runs = {"eager": fn, "static": static, "dynamic": dynamic}
                times: dict[str, list[float]] = {k: [] for k in runs}
                order = list(runs)
                for rep in range(opts.reps):
                    # rotated: which run follows which decides who pays the page faults of
                    # a fresh 16 MB output (glibc's mmap threshold adapts to the frees)
                    for k in order[rep % 3 :] + order[: rep % 3]:
                        times[k].append(_sample(runs[k], x))
            med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            print(
                f"{name:20s} {f'{rows}x{cols}':>10s} {med['eager']:9.3f} {med['static']:10.3f} "
                f"{med['dynamic']:11.3f} {med['dynamic'] / med['static']:10.2f} "
                f"{med['eager'] / med['dynamic']:9.2f}x"
            )
        compile_api.reset()


if __name__ == "__main__":
    main()
