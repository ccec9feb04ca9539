"""The main job: ``python -m compile_api.demo`` (``nox -s demo``).

1. The TorchDynamo README's toy example compiled with a custom backend that prints each FX graph
   as a table, then the original and modified bytecode and the guards of each compiled frame.
2. ``explain`` of the same function.
3. A transformer block compiled with the default backend, with its speedup over eager measured
   here beside torch.compile's.

Every section runs for real; a section that fails says so and why, it never pretends.
"""

from __future__ import annotations

import argparse
import dis
import inspect
import io
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .api import compile, reset
from .explain import explain
from .readable import guards_text
from .state import FrameRecord, state


def toy_example(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def graph_table(gm: torch.fx.GraphModule) -> str:
    """The graph as a table: opcode, name, target, args, kwargs (like fx's print_tabular)."""
    rows = [["opcode", "name", "target", "args", "kwargs"]]
    for node in gm.graph.nodes:
        rows.append([node.op, node.name, str(node.target), str(node.args), str(node.kwargs)])
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)


def my_compiler(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """A custom backend: print the graph, run it as it is."""
    del example_inputs
    print("my_compiler() called with FX graph:")
    print(graph_table(gm))
    print()
    return gm.forward


def _disassemble(code: Any) -> str:
    """``dis`` of ``code`` alone (depth 0: no nested lambdas or comprehensions)."""
    out = io.StringIO()
    dis.dis(code, file=out, depth=0)
    return out.getvalue()


def _resume_listing(code: Any, user_lines: range | None = None) -> str:
    """A resume function's own instructions, with the user's line numbers.

    A resume function is the original body entered by a jump to where the graph broke; the
    code before that jump target never runs, so only the instructions from it on are listed.
    With ``user_lines`` (generated code), line numbers outside the user's function are blank.
    """
    instructions = list(dis.get_instructions(code))
    start = 0
    for inst in instructions[:4] if user_lines is None else ():
        if inst.opname.startswith("JUMP") and isinstance(inst.argval, int):
            start = inst.argval
            break
    lines, last_line = [], None
    for inst in instructions:
        if inst.offset < start:
            continue
        line = inst.positions.lineno if inst.positions else None
        if user_lines is not None and line not in user_lines:
            line = None
        shown = f"{line:>4}" if line is not None and line != last_line else "    "
        last_line = line if line is not None else last_line
        argrepr = f" ({inst.argrepr})" if inst.argrepr else ""
        lines.append(f"{shown} {inst.offset:>6} {inst.opname:<28}{argrepr}")
    return "\n".join(lines)


def _section(title: str) -> None:
    print()
    print("=" * 78)
    print(title)
    print("=" * 78)


def _records_since(start: int) -> list[FrameRecord]:
    with state.lock:
        return list(state.records[start:])


def run_toy() -> bool:
    _section("1. The TorchDynamo README's toy example, compiled with a printing backend")
    print(f"# {inspect.getsourcefile(toy_example)}")
    print(inspect.getsource(toy_example))
    reset()
    torch.manual_seed(0)
    compiled = compile(toy_example, backend=my_compiler)
    start = len(state.records)
    ok = True
    # One call down each side of the branch, so both resume functions get compiled.
    for sign in (1.0, -1.0):
        a, b = torch.randn(10), sign * torch.rand(10)
        result = compiled(a, b)
        matches = torch.allclose(result, toy_example(a, b))
        print(f"toy_example with b.sum() {'>=' if sign > 0 else '<'} 0 matches eager: {matches}\n")
        ok = ok and matches
    for record in _records_since(start):
        print(f"\n--- frame {record.where}")
        if record.ran_eagerly:
            print(f"NOT COMPILED, runs eagerly: {record.ran_eagerly}")
            continue
        if record.code.co_name.startswith("__resume_at_"):
            print("RESUME FUNCTION (the rest of toy_example after the graph break):")
            print(_resume_listing(record.code))
        else:
            print("ORIGINAL BYTECODE:")
            print(_disassemble(record.code))
        print("MODIFIED BYTECODE:  (a line number marks an instruction of the user's line)")
        first = toy_example.__code__.co_firstlineno
        span = range(first, first + len(inspect.getsourcelines(toy_example)[0]))
        print(_resume_listing(record.transformed, span))
        print("GUARDS:")
        print(guards_text(record))
    return ok


def run_explain() -> None:
    _section("2. explain(toy_example)")
    a, b = torch.randn(10), torch.randn(10)
    print(explain(toy_example)(a, b))


class TransformerBlock(torch.nn.Module):
    def __init__(self, d: int = 256, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, 4 * d)
        self.fc2 = torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> Any:
        batch, seq, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q = q.view(batch, seq, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(batch, seq, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(batch, seq, self.heads, d // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (d // self.heads) ** 0.5)
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(batch, seq, d)
        x = x + self.proj(y)
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


def _median_seconds(fn: Callable[[], Any], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def run_model(repeats: int, reference_backend: str = "inductor") -> None:
    _section("3. A transformer block (d=256, seq=128, batch 8) with backend='inductor'")
    torch.manual_seed(0)
    model = TransformerBlock().eval()
    x = torch.randn(8, 128, 256)
    compiled = compile(model)
    with torch.no_grad():
        start = time.perf_counter()
        out = compiled(x)
        print(f"first call (compile): {time.perf_counter() - start:.2f} s")
        expected = model(x)
        close = torch.allclose(out, expected, atol=1e-4, rtol=1e-4)
        print(f"matches eager (atol=rtol=1e-4): {close}")
        # The reference, measured beside Strata as the benchmarks do (never used to compile
        # anything of Strata's): torch's own compiler with its default backend.
        reference = getattr(torch, "compile")(model, backend=reference_backend)  # noqa: B009
        if reference_backend != "inductor":
            print(f"(torch.compile figures below use backend={reference_backend!r})")
        start = time.perf_counter()
        ref_out = reference(x)
        print(f"torch.compile first call (compile): {time.perf_counter() - start:.2f} s")
        print(f"torch.compile matches eager: {torch.allclose(ref_out, expected, atol=1e-4)}")
        # Interleaved so all three see the same machine load.
        eager_runs, compiled_runs, reference_runs = [], [], []
        for _ in range(repeats):
            eager_runs.append(_median_seconds(lambda: model(x), 3))
            compiled_runs.append(_median_seconds(lambda: compiled(x), 3))
            reference_runs.append(_median_seconds(lambda: reference(x), 3))
        eager_s, compiled_s = statistics.median(eager_runs), statistics.median(compiled_runs)
        reference_s = statistics.median(reference_runs)
    print(f"eager median:         {eager_s * 1e3:8.3f} ms")
    print(f"Strata median:        {compiled_s * 1e3:8.3f} ms")
    print(f"torch.compile median: {reference_s * 1e3:8.3f} ms")
    print(
        f"speedup over eager: Strata {eager_s / compiled_s:.2f}x, "
        f"torch.compile {eager_s / reference_s:.2f}x (this run, this machine)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compile_api.demo", description=__doc__)
    parser.add_argument("--repeats", type=int, default=10, help="timing repeats for section 3")
    parser.add_argument(
        "--reference-backend",
        default="inductor",
        help="torch.compile's backend for the reference figures in section 3 (tests pass a "
        "cheap one: torch inductor's C++ build of the block takes minutes on a small machine)",
    )
    args = parser.parse_args(argv)
    failures = 0
    for name, section in (
        ("toy example", run_toy),
        ("explain", run_explain),
        ("transformer block", lambda: run_model(args.repeats, args.reference_backend)),
    ):
        try:
            if section() is False:
                failures += 1
        except Exception:
            failures += 1
            print(f"\nSECTION FAILED ({name}): this part of Strata is not working yet:")
            traceback.print_exc(file=sys.stdout)
    print()
    print("demo finished" + (f" with {failures} failing section(s)" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
