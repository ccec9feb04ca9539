"""Where a compiled CNN's call goes: each kernel and aten call of inductor_lite's wrapper timed.

The model is traced with ``torch.fx.symbolic_trace`` and compiled by ``compile_fx`` for
inference (real inputs, no_grad: the route without aot's runtime); the wrapper's source is
then rebuilt with a thread-CPU clock read around every kernel launch and aten call and run
``--reps`` times. Prints the items with the most time (median per call), what each is (the kernel's
steps, the aten op and its output size) and the total against eager's call.

    python benchmarks/inductor_cpu_profile.py tv_mobilenet_v3_small [--size 96] [--top 25]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.fx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from inductor_cpu_models import MODELS, build_with_inputs, first_tensor  # noqa: E402

_CALL = re.compile(r"\b(_kernel\d+|_fb\d+)\(")


def _sizes(node: Any) -> Any:
    return node.out_sizes if hasattr(node, "out_sizes") else node.sizes


def _describe(cg: Any) -> dict[str, str]:
    """``_kernelN`` / ``_fbN`` -> what it computes."""
    from inductor_lite.ir import FallbackNode
    from inductor_lite.scheduler import Kernel

    out: dict[str, str] = {}
    for k, item in enumerate(cg.items):
        if isinstance(item, Kernel):
            steps = ", ".join(
                f"{type(st.node).__name__[:-4].lower()}{list(_sizes(st.node))}" for st in item.steps
            )
            out[f"_{item.name}"] = f"{item.name}: {steps}"
        elif isinstance(item, FallbackNode):
            sizes = [list(o.sizes) for o in item.outputs if o is not None]
            out[f"_fb{k}"] = f"{item.target} -> {sizes}"
    return out


def instrument(cg: Any) -> tuple[Callable[..., Any], dict[str, list[float]]]:
    """The compiled graph's wrapper with every kernel and aten call timed."""
    ns = cg.run.__globals__
    times: dict[str, list[float]] = {}
    lines = []
    # a wrapper with kept buffers runs its body inside ``try:`` (kept_buffers.py)
    ind = " " * (8 if "_kept_acquire" in cg.wrapper_source else 4)
    for line in cg.wrapper_source.splitlines():
        m = _CALL.search(line)
        if m and line.startswith(ind) and not line.startswith(ind + " "):
            key = f"{m.group(1)}@{len(lines)}"
            times[key] = []
            lines += [f"{ind}_t0 = _clk()", line, f"{ind}_acc[{key!r}].append(_clk() - _t0)"]
        else:
            lines.append(line)
    ns2 = dict(ns, _clk=time.thread_time, _acc=times)
    exec(compile("\n".join(lines) + "\n", "<profiled wrapper>", "exec"), ns2)
    return ns2["call"], times


def _dynamo_graph(model: torch.nn.Module, *x: torch.Tensor) -> tuple[Any, list[Any]]:
    """The graph and real inputs torch.compile gives a backend (the benchmark's route)."""
    seen: list[Any] = []

    def backend(gm: Any, example_inputs: Any) -> Any:
        def run(*a: Any) -> Any:
            seen.append((gm, list(a)))
            return gm(*a)

        return run

    torch.compile(model, backend=backend)(*x)
    torch.compiler.reset()
    return seen[0]  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--dynamo",
        action="store_true",
        help="the graph torch.compile hands a backend (parameters as inputs), not symbolic_trace's",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    from inductor_lite import compile_fx

    torch.manual_seed(0)
    model, x = build_with_inputs(args.model, args.size)
    # transformers models do not symbolic_trace: they always take torch.compile's graph
    dynamo = args.dynamo or MODELS[args.model][0] == "transformers"
    with torch.no_grad():
        gm, inputs = (
            _dynamo_graph(model, *x) if dynamo else (torch.fx.symbolic_trace(model), list(x))
        )
        cg = compile_fx(gm, inputs)
        ref = first_tensor(model(*x))
        out = first_tensor(cg(*inputs))
        if out.shape == ref.shape:  # (a flat graph output list may start with another tensor)
            print(f"max rel err {((out - ref).abs().max() / ref.abs().max()).item():.1e}")
        call, times = instrument(cg)
        eager, total = [], []
        for _ in range(args.reps):
            t = time.thread_time()
            model(*x)
            eager.append(time.thread_time() - t)
            t = time.thread_time()
            call(list(inputs))
            total.append(time.thread_time() - t)
    what = _describe(cg)
    med = {k: statistics.median(v[2:] or v) * 1e6 for k, v in times.items()}
    summed = sum(med.values())
    print(
        f"eager {statistics.median(eager) * 1e3:.2f} ms,"
        f" ours {statistics.median(total) * 1e3:.2f} ms"
        f" (items {summed / 1e3:.2f} ms, {sum(k.startswith('_kernel') for k in med)} kernels,"
        f" {sum(k.startswith('_fb') for k in med)} aten calls)"
    )
    kinds: dict[str, float] = {}
    for k, us in med.items():
        name = what.get(k.split("@")[0], k)
        kind = "kernel" if name.startswith("kernel") else name.split(" ->")[0]
        kinds[kind] = kinds.get(kind, 0.0) + us
    for kind, us in sorted(kinds.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {us:9.1f} us  {kind}")
    print("top items:")
    for k, us in sorted(med.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"  {us:9.1f} us  {what.get(k.split('@')[0], k)[:150]}")


if __name__ == "__main__":
    main()
