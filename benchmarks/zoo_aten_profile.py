"""The aten calls left in Strata's compiled zoo steps: a torch.profiler table per case.

Runs ``make_step(case, build(), compile_api.compile)`` a few times, then profiles ``--steps``
steps and prints the aten operators whose names contain one of ``--ops`` (calls and self CPU
time), so a lowering can show which aten calls it removed (docs/xent-2026-11-27.md).

    python benchmarks/zoo_aten_profile.py --only gpt2-train,llama-train --threads 1
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from benchmarks.zoo.models import case, make_step  # noqa: E402

OPS = "scatter,full_like,index_put,nll_loss,gather,index,constant_pad,repeat,fill_,zero_"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="gpt2-train,llama-train,bert-train")
    parser.add_argument("--ops", default=OPS, help="substrings of aten op names, comma-separated")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    import compile_api

    wanted = [w for w in args.ops.split(",") if w]
    for name in args.only.split(","):
        compile_api.reset()
        c = case(name)
        step = make_step(c, c.model.build(), lambda m: compile_api.compile(m))
        for _ in range(3):
            step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.steps):
                step()
        rows = [
            e
            for e in prof.key_averages()
            if e.key.startswith("aten::") and any(w in e.key for w in wanted)
        ]
        print(f"## {name}: {args.steps} steps")
        print("| op | calls | self CPU us |\n| --- | ---: | ---: |")
        for e in sorted(rows, key=lambda e: -e.self_cpu_time_total):
            print(f"| {e.key} | {e.count} | {e.self_cpu_time_total:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
