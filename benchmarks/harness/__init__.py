"""The side-by-side benchmark harness: measure (run one workload), impls (eager, strata, torch),
report (table, JSON, plot), cli (the command line behind benchmarks/run.py)."""

from __future__ import annotations

from .cli import main, run_in_process
from .impls import Eager, GraphCounts, Impl, Options, Strata, TorchCompile, make_impl
from .measure import FAILED, OK, Result, Settings, compare, run_workload
from .report import markdown_report, markdown_table, plot_speedups, results_json

__all__ = [
    "main",
    "run_in_process",
    "run_workload",
    "Settings",
    "Result",
    "OK",
    "FAILED",
    "compare",
    "Impl",
    "Options",
    "GraphCounts",
    "Eager",
    "Strata",
    "TorchCompile",
    "make_impl",
    "markdown_table",
    "markdown_report",
    "results_json",
    "plot_speedups",
]
