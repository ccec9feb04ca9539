"""What the forward saves for the backward: aot's min-cut partition beside torch's, per tensor.

    python benchmarks/saved_for_backward.py [--workloads transformer_block_train,mlp_train]
                                            [--quick] [--device cpu]

For each training workload of the harness, the step's forward (model + MSE loss, the graph before
``loss.backward()``'s break) is captured once by torch.compile with a recording backend; that one
graph is then partitioned two ways:

* Strata: ``aot.aot_module_simplified`` with inductor_lite's decomposition table and
  ``aot.min_cut_partition`` (what inductor_lite uses on CUDA);
* torch: inductor's own route, ``torch.compile(backend="inductor")``, the forward graph read
  after its partition through inductor's post-grad custom pass hook (the graph inductor then
  generates code for).

It prints the saved tensors (name, shape, dtype, bytes; a graph input saved is marked, it costs
no memory of its own) and the totals, and checks that our gradients equal eager's. The
partition decides this on graph metadata only, so CPU gives the same sets as the GPU.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads.base import randn  # noqa: E402
from workloads.models import make_block, make_mlp  # noqa: E402

import aot  # noqa: E402
from inductor_lite.tracing import extra_decompositions, kept_as_aten  # noqa: E402

Saved = list[tuple[str, tuple[int, ...], str, int, bool]]  # name, shape, dtype, bytes, is_input


def inductor_lite_table() -> dict[Any, Any]:
    """The decomposition table inductor_lite's aot route uses (compile.py)."""
    table = dict(aot.core_decompositions())
    table.update(extra_decompositions())
    for op in kept_as_aten():
        table.pop(op, None)
    return table


def _describe(fw: torch.fx.GraphModule, num_fwd_outputs: int) -> Saved:
    out = next(n for n in reversed(fw.graph.nodes) if n.op == "output")
    rows: Saved = []
    for node in list(out.args[0])[num_fwd_outputs:]:
        if not isinstance(node, torch.fx.Node):
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        nbytes = int(val.numel()) * val.element_size()
        rows.append((node.name, tuple(int(s) for s in val.shape), str(val.dtype).replace(
            "torch.", ""), nbytes, node.op == "placeholder"))
    return rows


def _user_output_count(gm: torch.fx.GraphModule) -> int:
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    return len(out.args[0])


def capture(
    fn: Callable[..., Any], args: Sequence[torch.Tensor]
) -> tuple[torch.fx.GraphModule, list[Any]]:
    """Dynamo's torch-level graph of ``fn`` and its inputs (parameters are inputs too)."""
    graphs: list[tuple[torch.fx.GraphModule, list[Any]]] = []

    def record(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        graphs.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=record, fullgraph=True)(*args)
    assert len(graphs) == 1, f"expected one graph, got {len(graphs)}"
    return graphs[0]


def strata_saved(gm: torch.fx.GraphModule, args: Sequence[torch.Tensor]) -> tuple[Saved, Any]:
    fws: list[torch.fx.GraphModule] = []

    def fw_compiler(g: torch.fx.GraphModule, inputs: Sequence[Any]) -> Any:
        fws.append(g)
        return aot.eager_compiler(g, inputs)

    compiled = aot.aot_module_simplified(
        gm, list(args), fw_compiler, aot.eager_compiler, partition_fn=aot.min_cut_partition,
        decompositions=inductor_lite_table(),
    )
    return _describe(fws[0], _user_output_count(gm)), compiled


def torch_saved(fn: Callable[..., Any], args: Sequence[torch.Tensor]) -> Saved:
    import torch._inductor.config as inductor_config
    from torch._inductor.custom_graph_pass import CustomGraphPass

    graphs: list[torch.fx.Graph] = []

    class Record(CustomGraphPass):  # type: ignore[misc]
        def __call__(self, graph: torch.fx.Graph) -> None:
            graphs.append(graph)

        def uuid(self) -> Any:
            return None  # never cached: every run partitions again

    torch._dynamo.reset()
    with inductor_config.patch(post_grad_custom_post_pass=Record(), force_disable_caches=True):
        torch.compile(fn, backend="inductor", fullgraph=True)(*args)
    forwards = [g for g in graphs
                if any(n.op == "placeholder" and n.name.startswith("primals") for n in g.nodes)]
    assert len(forwards) == 1, f"expected one forward graph, got {len(forwards)}"
    fw = torch.fx.GraphModule(torch.nn.Module(), forwards[0])
    return _describe(fw, 1)


def _print(title: str, rows: Saved) -> tuple[int, int]:
    total = sum(r[3] for r in rows)
    own = sum(r[3] for r in rows if not r[4])
    print(f"  {title}: {len(rows)} saved, {total:,} bytes, {own:,} bytes not graph inputs")
    for name, shape, dtype, nbytes, is_input in sorted(rows, key=lambda r: -r[3]):
        mark = " (input)" if is_input else ""
        print(f"    {name:32s} {str(list(shape)):20s} {dtype:8s} {nbytes:>10,}{mark}")
    return total, own


def run(name: str, device: torch.device, quick: bool) -> None:
    make = make_block if name == "transformer_block_train" else make_mlp
    model, x = make(device, quick)
    model.train()
    target = randn(tuple(x.shape), device, 22)

    def loss_fn(inp: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(model(inp), tgt)

    print(f"{name} ({'quick' if quick else 'full'} sizes, {device})")
    gm, inputs = capture(loss_fn, (x, target))
    params = list(model.parameters())
    ours, compiled = strata_saved(gm, inputs)
    # gradients through our partition against eager's
    loss = compiled(*inputs)[0]
    got = torch.autograd.grad(loss, params)
    want = torch.autograd.grad(loss_fn(x, target), params)
    worst = max(float((g - w).abs().max()) for g, w in zip(got, want, strict=True))
    theirs = torch_saved(loss_fn, (x, target))
    ours_total, ours_own = _print("Strata min-cut", ours)
    torch_total, torch_own = _print("torch inductor", theirs)
    print(f"  saved bytes Strata / torch: {ours_total:,} / {torch_total:,} "
          f"(not inputs: {ours_own:,} / {torch_own:,}); max |grad - eager| {worst:.2e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="transformer_block_train,mlp_train")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    for name in args.workloads.split(","):
        run(name, torch.device(args.device), args.quick)


if __name__ == "__main__":
    main()
