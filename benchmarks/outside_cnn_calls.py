"""Inside one compiled timm CNN: each aten call and kernel of Strata's and torch inductor's
wrappers, timed in the model (thread CPU time), keyed by shapes and operand layouts.

Strata: ``compile_fx`` on the graph torch.compile hands a backend, its wrapper's aten
calls and kernels wrapped with a timer. torch inductor: ``torch.compile``, the generated
module's ``cpp_fused_*`` kernels and ``extern_kernels`` calls wrapped likewise. Both run
interleaved; per key the median time per model call, summed over the calls with that key.
The operand layouts are C (contiguous), CL (channels-last) or ? (neither); an aten call
with the same key in both is the same operation on the same operands, so a difference
there is the surroundings (caches) or the call's binding.

    python benchmarks/outside_cnn_calls.py densenet121 [--size 96] [--reps 6] [--top 40]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from inductor_cpu_profile import _dynamo_graph  # noqa: E402
from zoo.vision import import_timm  # noqa: E402

Key = tuple[str, tuple[int, ...], tuple[int, ...], str, str]


def _layout(t: object) -> str:
    if not isinstance(t, torch.Tensor) or t.dim() != 4:
        return "-"
    if t.is_contiguous():
        return "C"
    return "CL" if t.is_contiguous(memory_format=torch.channels_last) else "?"


class Recorder:
    def __init__(self) -> None:
        self.times: dict[str, dict[Key, list[float]]] = {"strata": {}, "torch": {}}

    def wrap(self, impl: str, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.thread_time()
            out = fn(*args, **kwargs)
            dt = time.thread_time() - t0
            ts = [a for a in args if isinstance(a, torch.Tensor)] + [None, None]
            key: Key = (
                name,
                tuple(ts[0].shape) if ts[0] is not None else (),
                tuple(ts[1].shape) if ts[1] is not None else (),
                _layout(ts[0]),
                _layout(ts[1]),
            )
            self.times[impl].setdefault(key, []).append(dt)
            return out

        return timed


def _instrument_strata(rec: Recorder, cg: Any) -> None:
    ns = cg.run.__globals__
    for k, v in list(ns.items()):
        if k.startswith("_fb"):
            ns[k] = rec.wrap("strata", getattr(v, "__name__", k) or k, v)
        elif k.startswith("_kernel"):
            ns[k] = rec.wrap("strata", "kernels", v)


def _instrument_torch(rec: Recorder) -> None:
    import torch._inductor.codecache as codecache

    for mod in list(codecache.PyCodeCache.modules):
        g = mod.__dict__
        for k, v in list(g.items()):
            if k.startswith("cpp_fused"):
                g[k] = rec.wrap("torch", "kernels", v)
        if "extern_kernels" in g:
            ek = g["extern_kernels"]
            g["extern_kernels"] = types.SimpleNamespace(
                **{
                    a: rec.wrap("torch", a, getattr(ek, a))
                    if callable(getattr(ek, a))
                    else getattr(ek, a)
                    for a in dir(ek)
                    if not a.startswith("__")
                }
            )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from inductor_lite import compile_fx

    torch.manual_seed(0)
    model = import_timm().create_model(args.model, pretrained=False).eval()
    x = torch.randn(1, 3, args.size, args.size)
    rec = Recorder()
    with torch.no_grad():
        # Strata's graph first: capturing it resets torch.compile's state
        gm, inputs = _dynamo_graph(model, x)
        cg = compile_fx(gm, inputs)
        _instrument_strata(rec, cg)
        opt = torch.compile(copy.deepcopy(model))
        opt(x)
        _instrument_torch(rec)
        for t in rec.times.values():
            t.clear()
        total: dict[str, list[float]] = {"strata": [], "torch": []}
        for _ in range(args.reps):
            for impl, fn in (("strata", lambda: cg(*inputs)), ("torch", lambda: opt(x))):
                t0 = time.thread_time()
                fn()
                total[impl].append(time.thread_time() - t0)
    print({k: f"{statistics.median(v) * 1e3:.2f} ms a call" for k, v in total.items()})
    rows: dict[tuple[tuple[int, ...], tuple[int, ...], str], dict[str, tuple[float, str, int]]] = {}
    for impl, d in rec.times.items():
        kinds: dict[str, float] = {}
        for key, v in d.items():
            us = statistics.median(v) * 1e6 * len(v) / args.reps
            kinds[key[0]] = kinds.get(key[0], 0.0) + us
            row = (key[1], key[2], key[0] if key[0] == "kernels" else "aten")
            rows.setdefault(row, {})[impl] = (us, f"{key[0][:14]} {key[3]}/{key[4]}", len(v))
        print(impl, {k: f"{v:.0f} us" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])})
    ranked = sorted(rows.items(), key=lambda kv: -max(u[0] for u in kv[1].values()))
    for (xs, ws, _), d in ranked[: args.top]:
        cells = [
            f"{i}: {u:7.0f} us {what:>24s} x{n // args.reps}"
            for i, (u, what, n) in sorted(d.items())
        ]
        print(f"{str((xs, ws))[:44]:44s} " + "  ".join(cells))


if __name__ == "__main__":
    main()
