"""What a zoo training step's forward saves for its backward on CPU: Strata's partitions beside
torch inductor's, per graph (issue #21).

    python benchmarks/saved_cpu.py [--only llama,gpt2,bert,t5] [--list]

For each ``<model>-train`` case: Strata (``compile_api.compile``, inductor_lite on CPU) runs one
step with every aot partition call recorded; each recorded joint graph is then partitioned again
by ``aot.default_partition``, ``aot.min_cut_partition`` and ``aot.cpu_partition``, and the saved
values counted (number, elements, how many are graph inputs, what the backward recomputes). torch
inductor runs the same step with a post-grad pass that records its backward graphs: the
placeholders that are not tangents are what its forward saved. ``--list`` prints each saved value.

    python benchmarks/saved_cpu.py --ab default_partition,cpu_partition [--rounds 41]

``--ab`` times the partitions instead: the case is compiled once per partition (inductor_lite
with ``aot.cpu_partition``, its CPU choice, swapped for the named one while it compiles), its
gradients checked against eager, then the compiled steps alternate for ``--rounds`` rounds
(process CPU time, 1 thread); medians and the ratio to the first partition are printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.fx  # noqa: E402

from benchmarks.zoo.models import case as zoo_case  # noqa: E402
from benchmarks.zoo.models import make_step  # noqa: E402

Row = tuple[str, tuple[int, ...], str, bool]  # name, shape, dtype, is a graph input


def _rows(placeholders: Sequence[torch.fx.Node], inputs: set[str]) -> list[Row]:
    rows = []
    for p in placeholders:
        val = p.meta.get("val")
        if isinstance(val, torch.Tensor):
            rows.append(
                (p.name, tuple(int(s) for s in val.shape), str(val.dtype)[6:], p.name in inputs)
            )
    return rows


def _saved_of_backward(bw: torch.fx.Graph, inputs: set[str]) -> list[Row]:
    return _rows(
        [n for n in bw.nodes if n.op == "placeholder" and not n.name.startswith("tangents")], inputs
    )


def _ops(gm: torch.fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.op == "call_function")


def _summary(rows: list[Row]) -> str:
    elems = sum(int(torch.Size(r[1]).numel()) for r in rows)
    own = sum(int(torch.Size(r[1]).numel()) for r in rows if not r[3])
    n_in = sum(1 for r in rows if r[3])
    return f"{len(rows):3d} saved ({n_in:2d} inputs), {elems:7,} elements ({own:7,} not inputs)"


def strata(name: str) -> list[tuple[Any, ...]]:
    """One training step through Strata; the joint graphs its partitions saw."""
    import aot
    import compile_api

    joints: list[tuple[Any, ...]] = []
    originals = {
        k: getattr(aot, k)
        for k in ("default_partition", "min_cut_partition", "cpu_partition")
        if hasattr(aot, k)
    }

    def recording(fn: Callable[..., Any]) -> Callable[..., Any]:
        def partition(joint: torch.fx.GraphModule, inputs: Any, *, num_fwd_outputs: int) -> Any:
            joints.append((joint, num_fwd_outputs, fn.__name__))
            return fn(joint, inputs, num_fwd_outputs=num_fwd_outputs)

        return partition

    for k, fn in originals.items():
        setattr(aot, k, recording(fn))
    try:
        compile_api.reset()
        c = zoo_case(f"{name}-train")
        make_step(c, c.model.build(), lambda m: compile_api.compile(m))()
    finally:
        for k, fn in originals.items():
            setattr(aot, k, fn)
    return joints


def torch_saved(name: str) -> list[list[Row]]:
    import torch._inductor.config as inductor_config
    from torch._inductor.custom_graph_pass import CustomGraphPass

    graphs: list[torch.fx.Graph] = []

    class Record(CustomGraphPass):  # type: ignore[misc]
        def __call__(self, graph: torch.fx.Graph) -> None:
            graphs.append(graph)

        def uuid(self) -> Any:
            return None

    torch.compiler.reset()
    c = zoo_case(f"{name}-train")
    with inductor_config.patch(post_grad_custom_post_pass=Record(), force_disable_caches=True):
        make_step(c, c.model.build(), lambda m: torch.compile(m, backend="inductor"))()
    backwards = [
        g
        for g in graphs
        if any(n.op == "placeholder" and n.name.startswith("tangents") for n in g.nodes)
    ]
    out = []
    for bw in backwards:
        fw = [g for g in graphs if g not in backwards]
        names = {n.name for g in fw for n in g.nodes if n.op == "placeholder"}
        out.append(_saved_of_backward(bw, names))
    return out


def ab(name: str, partitions: list[str], rounds: int) -> None:
    import statistics
    import time

    import aot
    import compile_api
    from benchmarks.zoo_cpu import _worst

    c = zoo_case(f"{name}-train")
    eager = [t.detach().clone() for t in make_step(c, c.model.build(), None)()]
    original = aot.cpu_partition
    steps: dict[str, Callable[[], list[torch.Tensor]]] = {}
    compile_api.reset()
    for label in partitions:
        aot.cpu_partition = getattr(aot, label)  # what inductor_lite calls on CPU
        try:
            step = make_step(c, c.model.build(), lambda m: compile_api.compile(m))
            err = _worst([t.detach().clone() for t in step()], eager)
        finally:
            aot.cpu_partition = original
        print(f"  {label}: worst gradient vs eager {err:.1e}", flush=True)
        steps[label] = step
    times: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(rounds):
        for label, step in steps.items():
            t0 = time.process_time()
            step()
            times[label].append(time.process_time() - t0)
    base = statistics.median(times[partitions[0]])
    for label, ts in times.items():
        med = statistics.median(ts)
        print(
            f"  {label:18s} median {1e3 * med:.3f} ms  min {1e3 * min(ts):.3f} ms  "
            f"{med / base:.3f}x of {partitions[0]}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="llama,gpt2,bert,t5")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--ab", default="", help="partitions to time against each other")
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--no-torch", action="store_true", help="Strata's partitions only")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    if args.ab:
        for name in args.only.split(","):
            print(f"{name}-train (load {os.getloadavg()[0]:.1f})")
            ab(name, args.ab.split(","), args.rounds)
        return
    import aot

    partitions = [
        getattr(aot, k)
        for k in ("default_partition", "min_cut_partition", "cpu_partition")
        if hasattr(aot, k)
    ]
    for name in args.only.split(","):
        print(f"{name}-train")
        for k, (joint, nfo, used) in enumerate(strata(name)):
            inputs = {n.name for n in joint.graph.nodes if n.op == "placeholder"}
            for fn in partitions:
                fw, bw = fn(joint, (), num_fwd_outputs=nfo)
                rows = _saved_of_backward(bw.graph, inputs)
                mark = " (used)" if fn.__name__ == used else ""
                print(
                    f"  graph {k} Strata {fn.__name__:18s}: {_summary(rows)}; "
                    f"fw {_ops(fw)} ops, bw {_ops(bw)} ops{mark}"
                )
                if args.list:
                    for r in rows:
                        print(
                            f"      {r[0]:28s} {list(r[1])!s:16s} {r[2]}{' input' if r[3] else ''}"
                        )
        for k, rows in enumerate([] if args.no_torch else torch_saved(name)):
            print(f"  graph {k} torch inductor           : {_summary(rows)}")
            if args.list:
                for r in rows:
                    print(f"      {r[0]:28s} {list(r[1])!s:16s} {r[2]}{' input' if r[3] else ''}")


if __name__ == "__main__":
    main()
