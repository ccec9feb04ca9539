"""The memory timeline of a compiled inference call, simulated on meta tensors (no GPU needed).

    python benchmarks/inference_memory_sim.py [--workloads transformer_block,gpt4] [--quick]
                                              [--top 12] [--wrapper]

The harness's inference workloads run under ``no_grad``, where compile_fx takes the inference
route (``trace_to_aten``, no aot). This script captures the workload's forward the same way,
lowers and schedules it for Triton, and runs the generated wrapper on meta tensors with every
kernel a no-op (``training_memory_sim.meta_wrapper``): each allocation, aten call and ``del`` of
the wrapper happens as on the GPU. The peak counts storages created during the call (the
output included), as the harness's "extra peak" does; the caching allocator's rounding and
cuBLAS's workspace are not modelled.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from saved_for_backward import capture  # noqa: E402
from training_memory_sim import Timeline, _wrapper_line, meta_wrapper  # noqa: E402
from workloads import BY_NAME  # noqa: E402

from inductor_lite import InductorConfig  # noqa: E402
from inductor_lite.graph_lowering import lower_graph  # noqa: E402
from inductor_lite.ir import LoweredGraph  # noqa: E402
from inductor_lite.scheduler import ScheduleItem, schedule  # noqa: E402
from inductor_lite.tracing import trace_to_aten  # noqa: E402


@dataclass
class _Lowered:
    """What ``meta_wrapper`` reads of a CompiledGraph."""

    lowered: LoweredGraph
    items: list[ScheduleItem]


def inference_timeline(name: str, quick: bool) -> tuple[Timeline, str]:
    """The timeline of one no_grad call of inference workload ``name``, and its wrapper."""
    workload = BY_NAME[name]
    instance = workload.build(torch.device("cpu"), quick)
    with torch.no_grad():
        gm, inputs = capture(instance.fn, instance.args)
        aten_gm, _ = trace_to_aten(gm, inputs)
        cfg = InductorConfig(codegen="triton", triton_autotune_cache={})
        lowered = lower_graph(aten_gm, inputs, cfg)
        items = schedule(lowered)
        run, source = meta_wrapper(_Lowered(lowered, items), boxed=False)  # type: ignore[arg-type]
        meta_inputs = [t.to("meta") if isinstance(t, torch.Tensor) else t for t in inputs]
        timeline = Timeline(_wrapper_line)
        with timeline:
            timeline.phase = "call"
            outs: Any = run(meta_inputs)
            del outs
    return timeline, source


def simulate(name: str, quick: bool, top: int, show_wrapper: bool) -> None:
    timeline, source = inference_timeline(name, quick)
    print(f"{name} ({'quick' if quick else 'full'} sizes): peak {timeline.peak / 2**20:.2f} MiB "
          f"at {timeline.peak_at}")
    for size, where in sorted(timeline.at_peak, key=lambda e: -e[0])[:top]:
        print(f"    {size / 2**20:8.3f} MiB  {where}")
    if show_wrapper:
        for k, line in enumerate(source.splitlines(), 1):
            print(f"    {k:3d} {line[:160]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="transformer_block,gpt4")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--wrapper", action="store_true", help="print the generated wrapper")
    args = parser.parse_args()
    for name in args.workloads.split(","):
        simulate(name, args.quick, args.top, args.wrapper)


if __name__ == "__main__":
    main()
