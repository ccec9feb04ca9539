"""Turns results into the Markdown table, the JSON and the PNG chart; describes the machine."""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .measure import FAILED, Result

COLUMNS = (
    "workload", "impl", "status", "1st call s", "median", "p25-p75", "min-max", "speedup",
    "over eager /call", "correct (max abs diff)", "graphs", "breaks", "peak mem MiB",
)


def machine_description(device: str) -> dict[str, Any]:
    """CPU model, cores, torch and Python versions, and the GPU when timing on CUDA."""
    import torch

    info: dict[str, Any] = {
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": device,
    }
    if device == "cuda" and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
        try:
            import triton

            info["triton"] = triton.__version__
        except ImportError:
            info["triton"] = None
    return info


def source_revision() -> str:
    """The checkout's commit, and whether the packages or benchmarks had uncommitted changes."""
    import subprocess

    root = Path(__file__).resolve().parent.parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=True, timeout=10).stdout
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--",
                                "packages", "benchmarks"],
                               capture_output=True, text=True, check=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        # A copy of the tree without .git (a remote GPU machine, say): the caller may name it.
        return os.environ.get("STRATA_BENCH_SOURCE", "unknown (not a git checkout)")
    suffix = " plus uncommitted changes in packages/ or benchmarks/" if dirty.strip() else ""
    return commit.strip() + suffix


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _time(seconds: float | None, unit: str) -> str:
    if seconds is None:
        return "-"
    if unit == "us":
        return f"{seconds * 1e6:.2f} us"
    return f"{seconds * 1e3:.3f} ms"


def _unit(result: Result) -> str:
    return "us" if result.kind == "overhead" else "ms"


def _row(r: Result) -> list[str]:
    unit = _unit(r)
    scale = 1e6 if unit == "us" else 1e3
    spread = (f"{r.p25_s * scale:.3g}-{r.p75_s * scale:.3g}"
              if r.p25_s is not None and r.p75_s is not None else "-")
    extremes = (f"{r.min_s * scale:.3g}-{r.max_s * scale:.3g}"
                if r.min_s is not None and r.max_s is not None else "-")
    status = "ok" if r.status != FAILED else f"FAILED ({r.stage}): {r.error}"
    if r.note:
        status += f" ({r.note})"
    if r.warning_count:
        plural = "s" if r.warning_count > 1 else ""
        status += f" [{r.warning_count} warning{plural} at compile: {r.warnings[0][:120]}]"
    if r.correct is None:
        correct = r.correctness_note or "-"
    elif r.correct:
        correct = "ref" if r.correctness_note == "reference" else f"yes ({r.max_abs_diff:.1e})"
    else:
        diff = "n/a" if r.max_abs_diff is None else f"{r.max_abs_diff:.1e}"
        correct = f"**NO** ({diff}) {r.correctness_note or ''}".strip()
    overhead = "-"
    if r.kind == "overhead" and r.overhead_us is not None and r.impl != "eager":
        overhead = f"{r.overhead_us:+.2f} us"
    graphs = "-" if r.graphs is None else str(r.graphs)
    breaks = "-" if r.graph_breaks is None else str(r.graph_breaks)
    if r.graphs is None and r.impl != "eager" and r.counts_note and r.status != FAILED:
        graphs = r.counts_note
    return [
        r.workload, r.impl, status,
        "-" if r.compile_s is None else f"{r.compile_s:.3f}",
        _time(r.median_s, unit), spread + ("" if spread == "-" else f" {unit}"),
        extremes + ("" if extremes == "-" else f" {unit}"),
        "-" if r.speedup is None else f"{r.speedup:.2f}x",
        overhead, correct, graphs, breaks,
        "-" if r.peak_mem_bytes is None else f"{r.peak_mem_bytes / 2**20:.1f}",
    ]


def _escape(cell: str) -> str:
    return cell.replace("|", "\\|").replace("\n", " ")


def markdown_table(results: Sequence[Result]) -> str:
    """The results as one Markdown table, a row per workload and implementation."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_escape(c) for c in _row(r)) + " |" for r in results]
    return "\n".join(lines)


def markdown_report(results: Sequence[Result], meta: dict[str, Any],
                    descriptions: dict[str, str], tolerances: dict[str, str]) -> str:
    """The full results page: when, where, how it was run, the table, and what each workload is."""
    machine = meta["machine"]
    settings = meta["settings"]
    head = [
        f"# Benchmark results: {machine['device']}",
        "",
        *(["**PARTIAL: the run has not finished (or was cut short); rows so far.**", ""]
          if meta.get("partial") else []),
        f"- date: {machine['date_utc']}",
        f"- machine: {machine['cpu']}, {machine['cores']} cores (torch uses "
        f"{machine['torch_threads']} threads), {machine['platform']}",
    ]
    if "gpu" in machine:
        head.append(f"- GPU: {machine['gpu']} (CUDA {machine.get('cuda')}, "
                    f"triton {machine.get('triton')})")
    head += [
        f"- torch {machine['torch']}, Python {machine['python']}",
        f"- source: {meta.get('source', 'unknown')}",
        f"- command: `{meta['command']}`",
        f"- settings: repeats={settings['repeats']}, warmup={settings['warmup']}, "
        f"min sample {settings['min_sample_s'] * 1e3:g} ms, clock={settings['clock']}, "
        f"quick={settings['quick']}, "
        f"inductor cache: {meta.get('inductor_cache', 'default')}",
        "",
        ("Times are process CPU time (all threads), not elapsed time. "
         if settings["clock"] == "process" else "")
        + "Times are per call: the median of the samples, with the interquartile range (p25-p75) "
        "and the extremes; speedup = eager median / median. See benchmarks/README.md for how "
        "each column is measured.",
        "",
        markdown_table(results),
        "",
        "## Workloads",
        "",
        "| workload | what | tolerance vs eager |",
        "|---|---|---|",
    ]
    seen = []
    for r in results:
        if r.workload not in seen:
            seen.append(r.workload)
    head += [f"| {name} | {descriptions.get(name, '')} | {tolerances.get(name, '')} |"
             for name in seen]
    return "\n".join(head) + "\n"


def results_json(results: Sequence[Result], meta: dict[str, Any]) -> str:
    """Every number measured, with the machine and the command, as JSON (NaN written as null)."""
    def clean(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, list):
            return [clean(v) for v in value]
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return value

    payload = {"meta": meta, "results": [clean(dataclasses.asdict(r)) for r in results]}
    return json.dumps(payload, indent=2, allow_nan=False) + "\n"


def plot_speedups(results: Sequence[Result], path: Path, title: str) -> str:
    """A bar chart of speedup over eager per workload and implementation; says what it did.

    matplotlib is imported here only: it is in the bench session's venv, not in every environment.
    """
    try:
        import matplotlib  # type: ignore[import-not-found,unused-ignore]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return "plot skipped: matplotlib is not installed"

    workloads: list[str] = []
    impls: list[str] = []
    for r in results:
        if r.workload not in workloads:
            workloads.append(r.workload)
        if r.impl != "eager" and r.impl not in impls:
            impls.append(r.impl)
    if not impls:
        return "plot skipped: no implementation besides eager"
    by_key = {(r.workload, r.impl): r for r in results}
    width = 0.8 / len(impls)
    fig, ax = plt.subplots(figsize=(max(8.0, 1.1 * len(workloads)), 4.8))
    for i, impl in enumerate(impls):
        xs, heights = [], []
        for j, name in enumerate(workloads):
            x = j - 0.4 + width * (i + 0.5)
            found = by_key.get((name, impl))
            if found is None:
                continue
            if found.status == FAILED or found.speedup is None:
                ax.text(x, 0.02, "FAILED", rotation=90, ha="center", va="bottom", fontsize=7,
                        transform=ax.get_xaxis_transform())
                continue
            xs.append(x)
            heights.append(found.speedup)
        ax.bar(xs, heights, width=width, label=impl)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xlim(-0.5, len(workloads) - 0.5)
    ax.set_xticks(range(len(workloads)))
    ax.set_xticklabels(workloads, rotation=30, ha="right")
    ax.set_ylabel("speedup over eager (higher is better)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot written to {path}"


def progress_line(index: int, total: int, results: Sequence[Result]) -> str:
    """One line per finished workload, for stderr."""
    parts = []
    for r in results:
        if r.status == FAILED:
            parts.append(f"{r.impl} FAILED ({r.error})")
        else:
            speed = "" if r.speedup is None or r.impl == "eager" else f" {r.speedup:.2f}x"
            parts.append(f"{r.impl} {_time(r.median_s, _unit(r))}{speed}")
    name = results[0].workload if results else "?"
    return f"[{index}/{total}] {name}: " + ", ".join(parts)


def python_command() -> str:
    """The command line as it was typed, for the report."""
    import shlex

    return " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv])
