"""The command line: choose workloads and implementations, run them, write the table, JSON and plot.

Each workload runs in a child process of its own (all implementations of it together,
interleaved), so a crash or hang in one implementation -- a segfault in a C extension, say -- is
reported as FAILED for that workload instead of ending the run. ``--in-process`` runs everything in
this process instead.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workloads import ALL, BY_NAME, Workload

from .impls import Impl, Options, first_line, impl_name, make_impl
from .measure import FAILED, Result, Settings, run_workload
from .report import (
    machine_description,
    markdown_report,
    plot_speedups,
    progress_line,
    python_command,
    results_json,
    source_revision,
)

BENCH_DIR = Path(__file__).resolve().parent.parent
RUN_PY = BENCH_DIR / "run.py"
DEFAULT_IMPLS = "eager,strata,torch"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The options; see benchmarks/README.md."""
    p = argparse.ArgumentParser(
        prog="benchmarks/run.py",
        description="Side-by-side benchmarks of eager, Strata and torch.compile.",
    )
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--only", default="", help="comma-separated workload names (default: all)")
    p.add_argument("--impl", default=DEFAULT_IMPLS,
                   help="comma-separated: eager, strata, torch, or module:attr plug-ins "
                        f"(default {DEFAULT_IMPLS}; eager is added when missing)")
    p.add_argument("--repeats", type=int, default=None, help="timed samples per implementation")
    p.add_argument("--warmup", type=int, default=None, help="untimed calls after the first")
    p.add_argument("--min-sample-ms", type=float, default=None,
                   help="a sample is enough calls to last this long (overhead probes: 20k calls)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads(N) in each run (default: torch's own choice)")
    p.add_argument("--clock", choices=("wall", "process"), default="wall",
                   help="time samples by elapsed time (default) or by this process's CPU time")
    p.add_argument("--quick", action="store_true", help="tiny sizes and few repeats: harness check")
    p.add_argument("--json", dest="json_path", default=None, help="write the JSON here")
    p.add_argument("--out-dir", default=str(BENCH_DIR / "results"),
                   help="where <device>.md, .json and .png go (quick runs: <device>-quick.*)")
    p.add_argument("--no-save", action="store_true", help="print only; write no results files")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--strata-backend", default="inductor", help="backend= for compile_api.compile")
    p.add_argument("--torch-backend", default="inductor", help="backend= for torch.compile")
    p.add_argument("--mode", default=None,
                   help="mode= for compile_api.compile and torch.compile (reduce-overhead, ...)")
    p.add_argument("--warm-cache", action="store_true",
                   help="keep torch inductor's on-disk cache (default: a fresh one, so compile "
                        "times are cold)")
    p.add_argument("--in-process", action="store_true",
                   help="run workloads in this process, not one child process each")
    p.add_argument("--timeout", type=float, default=1200.0,
                   help="seconds per workload (child mode)")
    p.add_argument("--list", action="store_true", help="list the workloads and exit")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.repeats is None:
        args.repeats = 3 if args.quick else 10
    if args.warmup is None:
        args.warmup = 1 if args.quick else 3
    if args.min_sample_ms is None:
        args.min_sample_ms = 1.0 if args.quick else 50.0
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    return args


def select_workloads(only: str) -> list[Workload]:
    """The workloads named in ``only`` (all when empty), in the canonical order."""
    if not only:
        return list(ALL)
    names = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise SystemExit(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
    return [w for w in ALL if w.name in names]


def select_impls(spec: str) -> list[str]:
    """Implementation specs in order, eager first: the reference for speedup and correctness."""
    specs = [s.strip() for s in spec.split(",") if s.strip()]
    if "eager" not in specs:
        specs.insert(0, "eager")
    return ["eager", *(s for s in specs if s != "eager")]


def _settings(args: argparse.Namespace) -> Settings:
    return Settings(device=args.device, repeats=args.repeats, warmup=args.warmup,
                    min_sample_s=args.min_sample_ms / 1e3, quick=args.quick, clock=args.clock)


def _options(args: argparse.Namespace) -> Options:
    return Options(strata_backend=args.strata_backend, torch_backend=args.torch_backend,
                   mode=args.mode)


def run_in_process(workload: Workload, impls: Sequence[tuple[str, Callable[[], Impl]]],
                   settings: Settings) -> list[Result]:
    """Run one workload here; an implementation that cannot even be made is recorded as FAILED."""
    made: list[tuple[str, Impl]] = []
    broken: list[Result] = []
    for name, factory in impls:
        try:
            made.append((name, factory()))
        except Exception as exc:
            broken.append(Result(workload.name, workload.kind, name, status=FAILED,
                                 stage="setup", error=first_line(exc)))
    results = run_workload(workload, made, settings)
    order = [name for name, _ in impls]
    return sorted(results + broken, key=lambda r: order.index(r.impl))


def _factories(specs: Sequence[str], options: Options) -> list[tuple[str, Callable[[], Impl]]]:
    return [(impl_name(s), lambda s=s: make_impl(s, options)) for s in specs]  # type: ignore[misc]


def _child_args(args: argparse.Namespace, workload: Workload, out: Path,
                specs: Sequence[str]) -> list[str]:
    child = [sys.executable, str(RUN_PY), "--worker", workload.name, "--worker-out", str(out),
             "--device", args.device, "--impl", ",".join(specs), "--repeats", str(args.repeats),
             "--warmup", str(args.warmup), "--min-sample-ms", str(args.min_sample_ms),
             "--strata-backend", args.strata_backend, "--torch-backend", args.torch_backend,
             *(["--mode", args.mode] if args.mode else []),
             "--clock", args.clock]
    if args.threads is not None:
        child += ["--threads", str(args.threads)]
    return [*child, "--quick"] if args.quick else child


def run_in_child(args: argparse.Namespace, workload: Workload, specs: Sequence[str],
                 env: dict[str, str]) -> list[Result]:
    """Run one workload in a child process, all implementations together.

    If the child dies or hangs, each implementation is run again apart, beside eager only, so one
    crashing implementation costs only its own row; those rows say so in their note.
    """
    together, error = _child_once(args, workload, specs, env)
    if together is not None:
        return together
    if len(specs) == 1:
        return [_process_failure(workload, specs[0], error)]
    sys.stderr.write(f"{workload.name}: {error}; running each implementation apart\n")
    note = "run apart from the others after the shared run crashed"
    by_impl: dict[str, Result] = {}
    for spec in specs[1:]:
        if len(specs) == 2:  # the pair is the run that just crashed: no need to repeat it
            pair, pair_error = None, error
        else:
            pair, pair_error = _child_once(args, workload, [specs[0], spec], env)
        if pair is None:
            by_impl[impl_name(spec)] = _process_failure(workload, spec, pair_error)
            continue
        for result in pair:
            result.note = note
            if result.impl != impl_name(specs[0]):
                by_impl[result.impl] = result
            else:
                by_impl.setdefault(result.impl, result)
    if impl_name(specs[0]) not in by_impl:
        alone, alone_error = _child_once(args, workload, [specs[0]], env)
        if alone is None:
            by_impl[impl_name(specs[0])] = _process_failure(workload, specs[0], alone_error)
        else:
            alone[0].note = note
            by_impl[impl_name(specs[0])] = alone[0]
    return [by_impl[impl_name(s)] for s in specs]


def _process_failure(workload: Workload, spec: str, error: str) -> Result:
    return Result(workload.name, workload.kind, impl_name(spec), status=FAILED, stage="process",
                  error=error)


def _child_once(args: argparse.Namespace, workload: Workload, specs: Sequence[str],
                env: dict[str, str]) -> tuple[list[Result] | None, str]:
    """(results, "") from one child process, or (None, why it gave none)."""
    with tempfile.TemporaryDirectory(prefix="strata-bench-") as tmp:
        out = Path(tmp) / "results.json"
        log_path = Path(tmp) / "child.log"
        with open(log_path, "w", encoding="utf-8") as log_file:
            try:
                proc = subprocess.run(_child_args(args, workload, out, specs), stdout=log_file,
                                      stderr=subprocess.STDOUT, env=env, timeout=args.timeout,
                                      check=False)
                reason = None if proc.returncode == 0 else _exit_reason(proc.returncode)
            except subprocess.TimeoutExpired:
                reason = f"workload timed out after {args.timeout:g} s"
        log_text = log_path.read_text(encoding="utf-8", errors="replace")
        if reason is None and out.exists():
            return [_result(d) for d in json.loads(out.read_text(encoding="utf-8"))], ""
    last = next((line for line in reversed(log_text.splitlines()) if line.strip()), "")
    names = ", ".join(impl_name(s) for s in specs)
    sys.stderr.write(f"--- {workload.name} [{names}]: child output (last 20 lines) ---\n")
    sys.stderr.write("\n".join(log_text.splitlines()[-20:]) + "\n")
    return None, f"{reason or 'child wrote no results'}; last output: {last.strip()[:200]}"


def _result(fields: dict[str, Any]) -> Result:
    # Only the fields this Result knows: a child running newer harness code may send more.
    known = {f.name for f in dataclasses.fields(Result)}
    return Result(**{k: v for k, v in fields.items() if k in known})


def _exit_reason(code: int) -> str:
    if code < 0:
        return f"child process killed by signal {-code}"
    return f"child process exited with status {code}"


def _worker(args: argparse.Namespace) -> int:
    workload = BY_NAME[args.worker]
    specs = select_impls(args.impl)
    results = run_in_process(workload, _factories(specs, _options(args)), _settings(args))
    Path(args.worker_out).write_text(
        json.dumps([dataclasses.asdict(r) for r in results]), encoding="utf-8")
    return 0


def _inductor_env(args: argparse.Namespace, tmp: str) -> tuple[dict[str, str], str]:
    env = dict(os.environ)
    if args.warm_cache:
        return env, "default (warm if run before)"
    # A fresh cache per run: torch.compile's compile time is then a cold compile, not a cache hit.
    env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp, "inductor")
    env["TRITON_CACHE_DIR"] = os.path.join(tmp, "triton")
    return env, "fresh per run (cold compiles)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks; the exit status is 0 even when rows FAILED (that is a result too)."""
    args = parse_args(argv)
    if args.threads is not None:
        import torch

        # Set before anything compiles: inductor's CPU kernels take their thread count from it.
        torch.set_num_threads(args.threads)
    if args.worker:
        return _worker(args)
    if args.list:
        for w in ALL:
            print(f"{w.name:26s} {w.kind:10s} {w.description}")
        return 0
    workloads = select_workloads(args.only)
    specs = select_impls(args.impl)
    settings = _settings(args)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: torch sees no CUDA device")

    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="strata-bench-cache-") as cache_tmp:
        env, cache_note = _inductor_env(args, cache_tmp)
        if args.in_process:
            os.environ.update({k: v for k, v in env.items() if k.endswith("CACHE_DIR")})
        for index, workload in enumerate(workloads, 1):
            sys.stderr.write(f"[{index}/{len(workloads)}] {workload.name}: running "
                             f"{', '.join(impl_name(s) for s in specs)}\n")
            sys.stderr.flush()
            if args.in_process:
                batch = run_in_process(workload, _factories(specs, _options(args)), settings)
            else:
                batch = run_in_child(args, workload, specs, env)
            results += batch
            sys.stderr.write(progress_line(index, len(workloads), batch) + "\n")
            sys.stderr.flush()
            if index < len(workloads):
                # Saved after every workload (marked partial), so a run cut short keeps its rows.
                meta = _meta(args, settings, specs, cache_note, partial=True)
                _save(args, results, meta, _report(results, meta, workloads), plot=False,
                      quiet=True)

    meta = _meta(args, settings, specs, cache_note, partial=False)
    report = _report(results, meta, workloads)
    print(report)
    _save(args, results, meta, report, plot=not args.no_plot, quiet=False)
    return 0


def _meta(args: argparse.Namespace, settings: Settings, specs: Sequence[str], cache_note: str,
          partial: bool) -> dict[str, Any]:
    return {
        "command": python_command(),
        "machine": machine_description(args.device),
        "settings": dataclasses.asdict(settings),
        "impls": [impl_name(s) for s in specs],
        "inductor_cache": cache_note,
        "source": source_revision(),
        "partial": partial,
    }


def _report(results: Sequence[Result], meta: dict[str, Any], workloads: Sequence[Workload]) -> str:
    return markdown_report(
        results, meta,
        {w.name: w.description for w in workloads},
        {w.name: str(w.tolerance) for w in workloads},
    )


def _save(args: argparse.Namespace, results: Sequence[Result], meta: dict[str, Any],
          report: str, *, plot: bool, quiet: bool) -> None:
    stem = f"{args.device}-quick" if args.quick else args.device
    out_dir = Path(args.out_dir)
    payload = results_json(results, meta)
    if args.json_path:
        Path(args.json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_path).write_text(payload, encoding="utf-8")
        if not quiet:
            sys.stderr.write(f"JSON written to {args.json_path}\n")
    if args.no_save:
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{stem}.md").write_text(report, encoding="utf-8")
    if not args.json_path:
        (out_dir / f"{stem}.json").write_text(payload, encoding="utf-8")
    if not quiet:
        sys.stderr.write(f"table written to {out_dir / (stem + '.md')}\n")
    if plot:
        title = f"Speedup over eager ({args.device}, {meta['machine']['date_utc']})"
        sys.stderr.write(plot_speedups(results, out_dir / f"{stem}.png", title) + "\n")
