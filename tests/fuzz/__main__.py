"""``python -m tests.fuzz --programs N --seed S``: the differential fuzzer's command line.

Program ``i`` of a run uses seed ``S * 1_000_000 + i`` (so a reported program is rerun alone with
``--seed S --first i --programs 1``). Each program runs with every backend in ``--backends``
except inductor, which runs on every ``--inductor-every``-th program (its C++ builds are slow).
A failing program is shrunk and saved under ``--save-dir`` as a plain pytest file.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from .campaign import run_campaign
from .generator import KNOWN_BUG_FEATURES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--programs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--first", type=int, default=0, help="index of the first program")
    parser.add_argument("--backends", default="eager,aot_eager,inductor")
    parser.add_argument("--inductor-every", type=int, default=25)
    parser.add_argument("--no-shrink", action="store_true")
    parser.add_argument("--save-dir", default=str(Path(__file__).parent / "regressions"))
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument(
        "--max-seconds", type=float, default=0.0, help="stop after this long (0: never)"
    )
    parser.add_argument(
        "--avoid",
        default="",
        help="comma-separated known-bug features to leave out: " + ", ".join(KNOWN_BUG_FEATURES),
    )
    parser.add_argument(
        "--families",
        default="",
        help="every program is built around these construct families (comma-separated, "
        "from families.FAMILIES or object_families.LATE_FAMILIES) instead of a random pick",
    )
    parser.add_argument("--report", default="", help="write a JSON summary here")
    parser.add_argument(
        "--shard",
        default="0/1",
        help="K/N: run only the programs first+j with j %% N == K (N processes, one seed; "
        "tests/fuzz/run_sharded.py starts them and merges their reports)",
    )
    args = parser.parse_args(argv)
    try:
        shard_k, shard_n = (int(p) for p in args.shard.split("/"))
    except ValueError:
        parser.error(f"--shard {args.shard!r}: expected K/N, e.g. 3/16")
    logging.basicConfig(level=logging.WARNING)
    start = time.monotonic()
    summary = run_campaign(
        seed=args.seed,
        programs=args.programs,
        first=args.first,
        backends=args.backends.split(","),
        inductor_every=args.inductor_every,
        shrink_failures=not args.no_shrink,
        save_dir=None if args.no_save else Path(args.save_dir),
        max_seconds=args.max_seconds or None,
        log=lambda line: print(line, flush=True),
        avoid=frozenset(a for a in args.avoid.split(",") if a),
        families=[f for f in args.families.split(",") if f] or None,
        shard=(shard_k, shard_n),
    )
    summary["seconds"] = round(time.monotonic() - start, 1)
    print(json.dumps(summary, indent=2))
    if args.report:
        Path(args.report).write_text(json.dumps(summary, indent=2))
    return 1 if summary["mismatches"] else 0


if __name__ == "__main__":
    sys.exit(main())
