"""The op-level family: random tensor programs aimed at inductor_lite's code generators and aot.

``generate_op_program(seed)`` builds a program as text: ``INPUTS`` (one ``op_inputs`` spec per
argument), ``REQUIRES_GRAD`` (the arguments that are leaves requiring grad), ``CODEGEN`` (``cpp``,
or ``triton`` on a small share: inductor_lite's Triton path under ``TRITON_INTERPRET=1``) and
``fn``, a straight-line DAG of torch ops. Each op is drawn from one of the kinds in ``OP_KINDS``,
its operands from the values made so far (the last few more often), and tried at once on real
tensors for both value sets the runner calls ``fn`` with: a line that raises (shapes that do not
broadcast, an integer division by zero, a dtype an op refuses) is dropped, so every program runs
eagerly. New arguments are added on demand (an index tensor in range, a weight that fits, a mask).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .op_builder import Builder, Reject, Restart
from .op_inputs import Spec
from .op_kinds import OP_KINDS

__all__ = ["OP_KINDS", "OpProgram", "generate_op_program"]


@dataclass
class OpProgram:
    """One generated program: its source and what it was built from."""

    seed: int
    source: str
    specs: list[Spec]
    requires_grad: tuple[int, ...]
    codegen: str
    kinds: list[str] = field(default_factory=list)


def _build(seed: int, attempt: int, kinds: list[str] | None) -> OpProgram:
    rng = random.Random(seed * 7919 + attempt)
    grad = rng.random() < 0.4
    b = Builder(rng, seed * 10 + attempt, grad)
    for _ in range(rng.randint(1, 3)):
        shape = b.random_shape()
        dtype = b.random_dtype()
        b.add_input(shape, dtype, grad=grad and rng.random() < 0.7)
    chosen = kinds or list(OP_KINDS)
    weights = [OP_KINDS[k][0] for k in chosen]
    used: list[str] = []
    steps = rng.randint(3, 10)
    tries = 0
    while len(used) < steps and tries < steps * 12:
        tries += 1
        kind = rng.choices(chosen, weights=weights)[0]
        try:
            OP_KINDS[kind][1](b)
            used.append(kind)
        except Reject:
            continue
    if not b.lines:
        raise Restart("no op ran")
    made = [n for n in b.values if n.startswith("v")] or b.values
    outs = {made[-1]}
    for _ in range(rng.randint(0, 2)):
        outs.add(rng.choice(b.values))
    if grad:
        outs.update(n for n in made[-3:] if b.t(n).requires_grad)
    args = ", ".join(f"a{i}" for i in range(len(b.specs)))
    ordered = [n for n in b.values if n in outs]
    body = "\n".join(f"    {line}" for line in b.lines)
    codegen = "triton" if rng.random() < 0.08 else "cpp"
    source = (
        f"# op fuzz program, seed {seed} (kinds: {', '.join(used)})\n"
        "import torch\nimport torch.nn.functional as F\n\n"
        f"SEED = {seed * 10 + attempt}\n"
        f"INPUTS = {b.specs!r}\n"
        f"REQUIRES_GRAD = {tuple(b.requires_grad)!r}\n"
        f"CODEGEN = {codegen!r}\n\n\n"
        f"def fn({args}):\n{body}\n    return ({', '.join(ordered)},)\n"
    )
    return OpProgram(seed, source, list(b.specs), tuple(b.requires_grad), codegen, used)


def generate_op_program(seed: int, kinds: list[str] | None = None) -> OpProgram:
    """A program that runs eagerly on both of its value sets (and backward, where it has grads)."""
    from .op_runner import eager_problem

    for attempt in range(50):
        try:
            program = _build(seed, attempt, kinds)
        except Restart:
            continue
        if eager_problem(program.source) is None:
            return program
    raise RuntimeError(f"no valid op program for seed {seed}")
