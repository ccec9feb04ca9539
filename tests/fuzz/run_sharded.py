"""Run one fuzz campaign as N processes and merge their reports into one summary.

``python -m tests.fuzz.run_sharded --shards 16 --programs 10000 --seed 7 --out-dir fuzz-out``
starts ``python -m tests.fuzz ... --shard K/16 --report fuzz-out/shard_K.json`` for K = 0..15
(every option it does not know itself goes to each shard unchanged), waits for all of them and
writes ``fuzz-out/summary.json``: programs, runs per backend, graphs, every mismatch with its
program index (sorted), the kinds of mismatch, and the seconds (wall, and CPU of each shard).
Program ``i`` keeps its index and seed (``S * 1_000_000 + i``), so one mismatch reruns alone with
``python -m tests.fuzz --seed S --first i --programs 1``. Each shard's output is in
``shard_K.log``. ``--merge a.json b.json ...`` merges existing reports (shards' or merged ones,
e.g. two halves of a run made with ``--first``) without running anything.

Exit status: 0 when every shard finished and nothing mismatched, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parents[2]
_SUMS = ("programs", "graphs_compiled", "runs_with_graphs")


def merge_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One summary of several reports (shards of a run, or earlier merged summaries).

    Counts add up; mismatches are concatenated and sorted by program index and backend; the
    shards' seconds are kept as CPU seconds (their sum) next to the slowest shard's.
    """
    if not reports:
        raise ValueError("nothing to merge")
    seeds = {r["seed"] for r in reports}
    if len(seeds) != 1:
        raise ValueError(f"reports of different seeds: {sorted(seeds)}")
    runs: Counter[str] = Counter()
    warnings: Counter[str] = Counter()
    mismatches: list[dict[str, Any]] = []
    shards: list[str] = []
    shard_seconds: list[float] = []
    failed: list[dict[str, Any]] = []
    for r in reports:
        runs.update(r.get("runs", {}))
        warnings.update(r.get("strata_warnings", {}))
        mismatches += r.get("mismatches", [])
        shards += r.get("shards", [r["shard"]] if "shard" in r else [])
        shard_seconds += r.get("shard_seconds", [r["seconds"]] if "seconds" in r else [])
        failed += r.get("failed_shards", [])
    mismatches.sort(key=lambda m: (m["index"], m["backend"]))
    return {
        "seed": reports[0]["seed"],
        "first": min(r.get("first", 0) for r in reports),
        "avoided": reports[0].get("avoided", []),
        "families": reports[0].get("families"),
        "shards": shards,
        **{key: sum(int(r.get(key, 0)) for r in reports) for key in _SUMS},
        "runs": dict(sorted(runs.items())),
        "strata_warnings": dict(warnings.most_common(20)),
        "mismatch_kinds": dict(Counter(m.get("signature", "?") for m in mismatches)),
        "mismatch_programs": sorted({m["index"] for m in mismatches}),
        "mismatches": mismatches,
        "failed_shards": failed,
        "shard_seconds": shard_seconds,
        "cpu_seconds": round(sum(shard_seconds), 1),
        "seconds": max(shard_seconds, default=0.0),
    }


def _tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def run_shards(shards: int, shard_args: list[str], out_dir: Path) -> dict[str, Any]:
    """Start ``shards`` campaign processes, wait for them, and merge their reports."""
    out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # one core per shard: no oversubscription
    start = time.monotonic()
    procs: list[tuple[int, subprocess.Popen[bytes], Path, Path]] = []
    for k in range(shards):
        report, log = out_dir / f"shard_{k}.json", out_dir / f"shard_{k}.log"
        report.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "tests.fuzz", *shard_args,
               "--shard", f"{k}/{shards}", "--report", str(report)]
        with log.open("wb") as out:
            proc = subprocess.Popen(cmd, cwd=_REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        procs.append((k, proc, report, log))
    print(f"started {shards} shards; logs in {out_dir}", flush=True)
    reports: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    for k, proc, report, log in procs:
        rc = proc.wait()
        if rc in (0, 1) and report.exists():  # 1: the shard found mismatches
            reports.append(json.loads(report.read_text()))
            print(f"shard {k}/{shards} done (exit {rc}) at {time.monotonic() - start:.0f}s",
                  flush=True)
        else:
            failed.append({"shard": f"{k}/{shards}", "returncode": rc, "log_tail": _tail(log)})
            print(f"shard {k}/{shards} FAILED (exit {rc}); see {log}", flush=True)
    if not reports:
        raise SystemExit(f"every shard failed; see the logs in {out_dir}")
    summary = merge_reports(reports)
    summary["failed_shards"] += failed
    summary["seconds"] = round(time.monotonic() - start, 1)  # wall time of the whole run
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.fuzz.run_sharded", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--shards", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out-dir", default="fuzz-shards", help="shard reports, logs, summary")
    parser.add_argument("--summary", default="",
                        help="the merged summary (default OUT_DIR/summary.json)")
    parser.add_argument("--merge", nargs="+", default=None, metavar="REPORT",
                        help="only merge these reports")
    args, shard_args = parser.parse_known_args(argv)
    if any(a.split("=")[0] in ("--shard", "--report") for a in shard_args):
        parser.error("--shard and --report are set per shard by this script")
    if args.merge is not None:
        summary = merge_reports([json.loads(Path(p).read_text()) for p in args.merge])
    else:
        if args.shards < 1:
            parser.error("--shards must be at least 1")
        summary = run_shards(args.shards, shard_args, Path(args.out_dir))
    path = Path(args.summary or Path(args.out_dir) / "summary.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2))
    brief = {k: v for k, v in summary.items() if k not in ("mismatches", "strata_warnings")}
    print(json.dumps(brief, indent=2))
    print(f"summary: {path}")
    return 1 if summary["mismatches"] or summary["failed_shards"] else 0


if __name__ == "__main__":
    sys.exit(main())
