"""What is alive at the peak of one call: the allocations behind the harness's peak-memory column.

    python benchmarks/gpu_memory_peak.py gpt4 transformer_block_train [--impl strata,torch]

For each workload and implementation: three warm calls, then one call under torch's CUDA
allocator history. Prints the call's extra peak (as the harness measures it) and the
allocations made during the call that are alive at that peak, largest first, each with the
innermost frames that are not torch's own (the generated wrapper's line, aot's runtime, ...).
"""

from __future__ import annotations

import argparse
import linecache
import logging
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


_WRAPPERS: list[list[str]] = []  # inductor_lite's generated wrappers, from its output_code log


class _Wrappers(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        marker = "# ---- wrapper (Python) ----\n"
        if marker in text:
            _WRAPPERS.append(text.split(marker, 1)[1].splitlines())


def _source(filename: str, line: int) -> str:
    if filename.endswith("<generated wrapper>"):
        # every wrapper shares the file name: show the line of each that has it
        return " | ".join(w[line - 1].strip() for w in _WRAPPERS if len(w) >= line)
    return linecache.getline(filename, line).strip()


def _frames(event: dict[str, Any]) -> str:
    keep = []
    for f in event.get("frames", []):
        name = f.get("filename", "")
        python = name.endswith(".py") or name.endswith("<generated wrapper>")
        if not python or "/site-packages/torch/" in name or "/triton/" in name:
            continue
        line = int(f.get("line", 0))
        keep.append(f"{Path(name).name}:{line}:{f.get('name')}  [{_source(name, line)[:160]}]")
        if len(keep) == 2:
            break
    return " < ".join(keep) or "(torch only)"


def live_at_peak(trace: list[dict[str, Any]]) -> tuple[int, list[dict[str, Any]]]:
    """Bytes allocated during the traced call at its peak, and the blocks alive then."""
    live: dict[int, dict[str, Any]] = {}
    now = peak = 0
    at_peak: list[dict[str, Any]] = []
    for ev in trace:
        action = ev.get("action")
        if action == "alloc":
            live[ev["addr"]] = ev
            now += ev["size"]
            if now > peak:
                peak, at_peak = now, list(live.values())
        elif action in ("free_requested", "free_completed") and ev["addr"] in live:
            now -= live.pop(ev["addr"])["size"]
    return peak, at_peak


def main() -> None:
    from harness.impls import Options, make_impl  # type: ignore[import-not-found]
    from workloads import BY_NAME, TRAINING  # type: ignore[import-not-found]

    p = argparse.ArgumentParser()
    p.add_argument("workloads", nargs="+")
    p.add_argument("--impl", default="strata,torch")
    p.add_argument("--top", type=int, default=15)
    opts = p.parse_args()
    dev = torch.device("cuda")
    code_log = logging.getLogger("strata.output_code")
    code_log.setLevel(logging.DEBUG)
    code_log.addHandler(_Wrappers())
    for name in opts.workloads:
        w = BY_NAME[name]
        for spec in opts.impl.split(","):
            _WRAPPERS.clear()
            inst = w.build(dev, False)
            fn = make_impl(spec, Options()).compile(inst.fn)
            grad = torch.enable_grad() if w.kind == TRAINING else torch.no_grad()
            with grad:
                for _ in range(3):
                    fn(*inst.args)
                torch.cuda.synchronize()
                before = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                torch.cuda.memory._record_memory_history(max_entries=200000)
                fn(*inst.args)
                torch.cuda.synchronize()
                snap = torch.cuda.memory._snapshot()
                torch.cuda.memory._record_memory_history(enabled=None)
            extra = torch.cuda.max_memory_allocated() - before
            trace = snap["device_traces"][torch.cuda.current_device()]
            peak, blocks = live_at_peak(trace)
            print(f"== {name} / {spec}: extra peak {extra / 2**20:.2f} MiB "
                  f"(traced {peak / 2**20:.2f} MiB in {len(blocks)} blocks)")
            for ev in sorted(blocks, key=lambda e: -e["size"])[: opts.top]:
                print(f"   {ev['size'] / 2**20:8.3f} MiB  {_frames(ev)}")
            del fn, inst
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
