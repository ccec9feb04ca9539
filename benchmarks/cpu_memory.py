"""Peak memory of one call on CPU, the way the CUDA harness counts it (``peak mem MiB``).

CPU tensors have no allocator statistics, so a dispatch mode follows every storage an op
creates: a storage is live from the op that made it until the last tensor using it dies
(a weak reference per tensor). The peak is the most live bytes at any time during one call,
counting only storages created during it (as ``max_memory_allocated - memory_allocated``
does). Tensors made outside any op seen by the mode (triton's interpreter writes through
numpy, but the wrapper allocates with ``torch.empty_strided``, which is seen) are missed.

    python benchmarks/cpu_memory.py transformer_block_train --impl strata --codegen triton

``--codegen triton`` runs the Triton wrapper under TRITON_INTERPRET=1 (set it yourself), the
CUDA path's buffer plan on CPU tensors.
"""

from __future__ import annotations

import argparse
import sys
import weakref
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))


class StorageTracker(TorchDispatchMode):
    """Live bytes of the storages created by ops while it is active, and their peak."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, list[int]] = {}  # data_ptr -> [nbytes, live tensors]
        self.current = 0
        self.peak = 0
        self.known: set[int] = set()
        self.at_peak: list[tuple[str, int]] = []
        self.names: dict[int, str] = {}

    def note_existing(self, tensors: list[torch.Tensor]) -> None:
        for t in tensors:
            self.known.add(t.untyped_storage().data_ptr())

    def _release(self, ptr: int) -> None:
        entry = self.live.get(ptr)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.current -= entry[0]
            del self.live[ptr]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in pytree.tree_leaves(out):
            if (
                not isinstance(t, torch.Tensor)
                or t.device.type != "cpu"
                or isinstance(t, FakeTensor)  # compiling traces with these: no memory
            ):
                continue
            st = t.untyped_storage()
            ptr = st.data_ptr()
            if ptr == 0 or ptr in self.known:
                continue
            entry = self.live.get(ptr)
            if entry is None:
                entry = self.live[ptr] = [st.nbytes(), 0]
                self.current += entry[0]
                self.names[ptr] = str(func)
                if self.current > self.peak:
                    self.peak = self.current
                    self.at_peak = [(self.names[p], v[0]) for p, v in self.live.items()]
            entry[1] += 1
            weakref.finalize(t, self._release, ptr)
        return out


_DISPATCH = StorageTracker.__torch_dispatch__
_RELEASE = StorageTracker._release


def measure(
    fn: Any, args: tuple[Any, ...], keep: list[torch.Tensor], verbose: bool = False
) -> float:
    tracker = StorageTracker()
    tracker.note_existing(keep)
    with tracker:
        result = fn(*args)
    del result
    if verbose:
        for name, nbytes in sorted(tracker.at_peak, key=lambda x: -x[1]):
            print(f"    live at peak: {nbytes / 2**20:8.3f} MiB  {name}")
    return tracker.peak / 2**20


def main() -> None:
    from workloads import ALL as ALL_WORKLOADS  # type: ignore[import-not-found]
    from workloads import TRAINING

    p = argparse.ArgumentParser()
    p.add_argument("workloads", nargs="*")
    p.add_argument("--impl", choices=("eager", "strata", "torch"), default="strata")
    p.add_argument("--codegen", default="auto")
    p.add_argument("--wrapper", action="store_true", help="print the generated wrappers")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--verbose", action="store_true", help="list the storages live at the peak")
    p.add_argument(
        "--fake-triton",
        action="store_true",
        help="with --codegen triton: kernels that do nothing (results wrong, buffer plan the "
        "CUDA path's; far faster than TRITON_INTERPRET=1)",
    )
    opts = p.parse_args()
    if opts.fake_triton:
        from inductor_lite import triton_runtime

        def fake(source: str, sources: Any, choices: Any) -> Any:
            return {s.name: ((lambda *a: None), s.params) for s in sources}

        triton_runtime.triton_kernels = fake  # type: ignore[assignment]
    names = set(opts.workloads)
    for w in ALL_WORKLOADS:
        if names and w.name not in names:
            continue
        inst = w.build(torch.device("cpu"), opts.quick)
        fn = inst.fn
        if opts.impl == "strata":
            import compile_api
            from inductor_lite import InductorConfig, compile_fx

            cfg = InductorConfig(codegen=opts.codegen)
            # the compiled function's frame hook must not compile the tracker itself
            # (torch.compiler.disable is not honoured for frames the hook meets directly)
            StorageTracker.__torch_dispatch__ = compile_api.disable(  # type: ignore[method-assign]
                _DISPATCH
            )
            StorageTracker._release = compile_api.disable(_RELEASE)  # type: ignore[method-assign]
            fn = compile_api.compile(fn, backend=lambda gm, ex: compile_fx(gm, ex, config=cfg))
        elif opts.impl == "torch":
            StorageTracker.__torch_dispatch__ = torch.compiler.disable(  # type: ignore[method-assign]
                _DISPATCH
            )
            fn = torch.compile(fn)
        # inference workloads run under no_grad, as in the harness
        mode = torch.enable_grad() if w.kind == TRAINING else torch.no_grad()
        with mode:
            # warm up under a tracker too: the dispatch mode is part of what the compiled
            # code guards on, so the measured call must not be a first (compiling) call
            for _ in range(3):
                with StorageTracker():
                    fn(*inst.args)
            keep = [t for t in pytree.tree_leaves(inst.args) if isinstance(t, torch.Tensor)]
            keep += [t for t in inst.state()]
            mib = measure(fn, inst.args, keep, opts.verbose)
        if opts.wrapper and opts.impl == "strata":
            import gc

            from inductor_lite import CompiledGraph

            for obj in gc.get_objects():
                if isinstance(obj, CompiledGraph):
                    print(obj.wrapper_source)
        print(f"{w.name:28s} {opts.impl:7s} peak {mib:8.2f} MiB", flush=True)


if __name__ == "__main__":
    main()
