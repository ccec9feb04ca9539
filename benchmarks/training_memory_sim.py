"""The memory timeline of a compiled training step, simulated on meta tensors (no GPU needed).

    python benchmarks/training_memory_sim.py [--workloads transformer_block_train,mlp_train]
                                             [--quick] [--top 12]

The step's forward (model + MSE loss) goes through inductor_lite's CUDA route: aot with
inductor_lite's decompositions and ``aot.min_cut_partition``, each graph lowered and scheduled
for Triton. Then the generated wrappers themselves run -- the forward's, and the backward's
boxed one, as the runtime calls them -- on meta tensors with every Triton kernel a no-op: each
``empty_strided`` and aten call the wrapper makes allocates what it would on the GPU, and each
``del`` frees it. The timeline counts every storage created after the step starts (parameters and
inputs excluded, as the harness's "extra peak" excludes memory alive before the call, but the
previous step's gradients are not counted either: this script starts with none).

It prints the peak, the wrapper line at the peak and what is alive there. The caching
allocator's rounding and cuBLAS's workspace are not modelled.
"""

from __future__ import annotations

import argparse
import sys
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))

from saved_for_backward import capture, inductor_lite_table  # noqa: E402
from workloads.base import randn  # noqa: E402
from workloads.models import make_block, make_mlp  # noqa: E402

import aot  # noqa: E402
from inductor_lite import InductorConfig, compile_aten_graph  # noqa: E402
from inductor_lite.compile import CompiledGraph  # noqa: E402
from inductor_lite.triton_codegen import generate_triton  # noqa: E402
from inductor_lite.wrapper import build_wrapper, kernel_local_buffers  # noqa: E402
from inductor_lite.wrapper_args import as_view  # noqa: E402

_WRAPPER = "<generated wrapper>"


class Timeline(TorchDispatchMode):
    """Bytes of the storages ops create while active: now, peak, and who is alive at the peak."""

    def __init__(self, label: Callable[[], str]) -> None:
        super().__init__()
        self.label = label
        self.phase = ""
        self.live: dict[int, list[Any]] = {}
        self.now = 0
        self.peak = 0
        self.peak_at = ""
        self.at_peak: list[tuple[int, str]] = []
        self.phase_peak: dict[str, int] = {}

    def _drop(self, key: int) -> None:
        entry = self.live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.now -= entry[0]
            del self.live[key]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in pytree.tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            key = t.untyped_storage()._cdata
            if key not in self.live:
                where = f"{self.phase} {self.label()} {func}"
                self.live[key] = [t.untyped_storage().nbytes(), 0, where]
                self.now += self.live[key][0]
                self.phase_peak[self.phase] = max(self.phase_peak.get(self.phase, 0), self.now)
                if self.now > self.peak:
                    self.peak, self.peak_at = self.now, where
                    self.at_peak = [(v[0], v[2]) for v in self.live.values()]
            self.live[key][1] += 1
            weakref.finalize(t, self._drop, key)
        return out


def _wrapper_line() -> str:
    f = sys._getframe(0)
    while f is not None:
        if f.f_code.co_filename.endswith(_WRAPPER):
            return f"line {f.f_lineno}"
        f = f.f_back
    return ""


def meta_wrapper(compiled: CompiledGraph, boxed: bool) -> tuple[Callable[..., Any], str]:
    """``compiled``'s wrapper rebuilt with no-op kernels, allocating on the meta device."""
    lowered, items = compiled.lowered, compiled.items
    kernels = [i for i in items if not hasattr(i, "target")]
    local = kernel_local_buffers(lowered, items)
    _, sources = generate_triton(kernels, lowered.buffers, interpret=True, local=local)

    def noop(*args: object) -> None:
        del args

    fns = {s.name: (noop, s.params) for s in sources}
    run, source = build_wrapper(lowered, items, fns, pass_pointers=False, boxed=boxed)
    run.__globals__["_dev"] = torch.device("meta")
    # the CPU wrapper's C++ allocation (inductor_lite/fast_alloc.py) names no device
    run.__globals__["_empty"] = _meta_empty
    run.__globals__["_as_view"] = as_view
    return run, source


def _meta_empty(
    sizes: Sequence[int], strides: Sequence[int], dtype: torch.dtype | None = None, **_: object
) -> torch.Tensor:
    return torch.empty_strided(sizes, strides, dtype=dtype, device="meta")


def step_timeline(name: str, quick: bool) -> Timeline:
    """The timeline of one step of training workload ``name`` (its phase peaks, its peak)."""
    return _run(name, quick)[0]


def _run(name: str, quick: bool) -> tuple[Timeline, int, int, int, str]:
    make = make_block if name == "transformer_block_train" else make_mlp
    model, x = make(torch.device("cpu"), quick)
    model.train()
    target = randn(tuple(x.shape), torch.device("cpu"), 22)

    def loss_fn(inp: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(model(inp), tgt)

    gm, inputs = capture(loss_fn, (x, target))
    cfg = InductorConfig(codegen="triton", triton_autotune_cache={})
    graphs: list[CompiledGraph] = []

    def backend(g: torch.fx.GraphModule, ins: Sequence[Any]) -> Any:
        c = compile_aten_graph(g, ins, config=cfg)
        assert isinstance(c, CompiledGraph)
        graphs.append(c)
        return c

    aot.aot_module_simplified(
        gm,
        inputs,
        backend,
        backend,
        partition_fn=aot.min_cut_partition,
        decompositions=inductor_lite_table(),
        keep_input_mutations=True,
    )
    fw, bw = graphs
    fw_run, _ = meta_wrapper(fw, boxed=False)
    bw_run, bw_source = meta_wrapper(bw, boxed=True)
    meta_inputs = [t.to("meta") if isinstance(t, torch.Tensor) else t for t in inputs]
    timeline = Timeline(_wrapper_line)
    with timeline:
        timeline.phase = "forward"
        outs = list(fw_run(list(meta_inputs)))
        n_saved = len(outs) - 1
        loss, saved = outs[0], outs[1:]
        del outs
        saved_bytes = sum(
            t.untyped_storage().nbytes()
            for t in {
                s.untyped_storage()._cdata: s
                for s in saved
                if isinstance(s, torch.Tensor) and not any(s is i for i in meta_inputs)
            }.values()
        )
        after_forward = timeline.now
        timeline.phase = "backward"
        args = [*saved, torch.ones_like(loss)]
        del saved
        grads = bw_run(args)
        del grads, loss
    return timeline, n_saved, saved_bytes, after_forward, bw_source


def simulate(name: str, quick: bool, top: int) -> None:
    timeline, n_saved, saved_bytes, after_forward, bw_source = _run(name, quick)
    print(
        f"{name} ({'quick' if quick else 'full'} sizes): forward saves {n_saved} values "
        f"({saved_bytes / 2**20:.2f} MiB of storages not inputs); alive after the forward "
        f"{after_forward / 2**20:.2f} MiB; peak {timeline.peak / 2**20:.2f} MiB at "
        f"{timeline.peak_at}; backward peak "
        f"{timeline.phase_peak.get('backward', 0) / 2**20:.2f} MiB"
    )
    for size, where in sorted(timeline.at_peak, key=lambda e: -e[0])[:top]:
        print(f"    {size / 2**20:8.3f} MiB  {where}")
    if timeline.peak_at.startswith("backward"):
        lines = bw_source.splitlines()
        print("  backward wrapper:")
        for k, line in enumerate(lines[:80], 1):
            print(f"    {k:3d} {line[:150]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="transformer_block_train,mlp_train")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    for name in args.workloads.split(","):
        simulate(name, args.quick, args.top)


if __name__ == "__main__":
    main()
