"""The op family's program builder: values made so far, each line tried on real tensors.

``Builder`` keeps two environments (one per value set the runner calls ``fn`` with), runs every
candidate line in both and keeps it only when it runs: ``Reject`` drops the line, ``Restart``
the whole program (a line that ran on one set, mutated, then failed on the other).
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .op_inputs import DTYPES, Spec, make_input

__all__ = ["Builder", "Reject", "Restart", "broadcasts", "dtype_name", "is_int"]

FLOATS = ("float32", "float64", "float16", "bfloat16")
DTYPE_WEIGHTS = {
    "float32": 40,
    "float64": 10,
    "float16": 9,
    "bfloat16": 9,
    "int32": 8,
    "int64": 12,
    "bool": 8,
}
LAYOUTS = (
    "contig",
    "contig",
    "contig",
    "transposed",
    "offset",
    "strided",
    "channels_last",
    "expanded",
)
SCALARS_F = (
    "2.0",
    "-0.5",
    "0.0",
    "-0.0",
    "1e-3",
    "3",
    "float('nan')",
    "float('inf')",
    "-float('inf')",
    "True",
)
SCALARS_I = ("2", "-3", "0", "1", "7", "True", "1.5")
MAX_NUMEL = 4096


class Reject(Exception):
    """The candidate line does not run eagerly (dropped)."""


class Restart(Exception):
    """A line ran on one value set and not the other after mutating: start the program again."""


class Builder:
    def __init__(self, rng: random.Random, seed: int, grad: bool) -> None:
        self.rng = rng
        self.seed = seed
        self.grad = grad
        self.specs: list[Spec] = []
        self.requires_grad: list[int] = []
        self.envs: list[dict[str, Any]] = [{"torch": torch, "F": F} for _ in range(2)]
        self.lines: list[str] = []
        self.values: list[str] = []
        self.counter = 0

    # ---------------------------------------------------------------- values

    def t(self, name: str) -> torch.Tensor:
        value = self.envs[0][name]
        assert isinstance(value, torch.Tensor)
        return value

    def pick(self, pred: Callable[[torch.Tensor], bool] = lambda t: True) -> str:
        names = [n for n in self.values if pred(self.t(n))]
        if not names:
            raise Reject("no operand")
        recent = names[-4:]
        return self.rng.choice(recent if self.rng.random() < 0.55 else names)

    def add_input(
        self,
        shape: tuple[int, ...],
        dtype: str,
        fill: str = "",
        layout: str = "",
        grad: bool = False,
    ) -> str:
        rng = self.rng
        if not fill:
            fill = "int" if dtype in ("int32", "int64") else "mask" if dtype == "bool" else "normal"
            if dtype in FLOATS and rng.random() < 0.15:
                fill = "special"
        if not layout:
            layout = rng.choice(LAYOUTS) if rng.random() < 0.5 else "contig"
            if layout == "channels_last" and len(shape) != 4:
                layout = "contig"
            if layout == "expanded" and (grad or fill.startswith(("index", "perm"))):
                layout = "contig"
        index = len(self.specs)
        spec: Spec = (tuple(shape), dtype, layout, fill)
        self.specs.append(spec)
        name = f"a{index}"
        grad = grad and dtype in ("float32", "float64")
        if grad:
            self.requires_grad.append(index)
        for k, env in enumerate(self.envs):
            value = make_input(spec, self.seed, index, k)
            env[name] = value.detach().requires_grad_(True) if grad else value
        self.values.append(name)
        return name

    def random_shape(self, rank: int | None = None) -> tuple[int, ...]:
        rank = self.rng.choice((0, 1, 1, 2, 2, 2, 3, 3, 4)) if rank is None else rank
        sizes = (1, 2, 3, 4, 5, 7, 8)
        shape = [self.rng.choice(sizes) for _ in range(rank)]
        if shape and self.rng.random() < 0.04:
            shape[self.rng.randrange(len(shape))] = 0
        return tuple(shape)

    def related_shape(self, base: tuple[int, ...]) -> tuple[int, ...]:
        """A shape that broadcasts with ``base``."""
        r = self.rng.random()
        if r < 0.5:
            return base
        if r < 0.8:
            return tuple(1 if self.rng.random() < 0.4 else s for s in base)
        return base[self.rng.randrange(len(base) + 1) :]

    def random_dtype(self, grad_ok: bool = True) -> str:
        names = list(DTYPE_WEIGHTS)
        return self.rng.choices(names, weights=[DTYPE_WEIGHTS[n] for n in names])[0]

    # ---------------------------------------------------------------- lines

    def run(self, stmt: str) -> None:
        """Run ``stmt`` on both value sets; raise Reject when it fails on the first."""
        for k, env in enumerate(self.envs):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    exec(stmt, env)
            except Exception as exc:
                if k == 0:
                    raise Reject(str(exc)) from exc
                raise Restart(str(exc)) from exc

    def emit(self, expr: str, kind: str) -> str:
        name = f"v{self.counter}"
        stmt = f"{name} = {expr}"
        inputs_before = len(self.specs)
        try:
            self.run(stmt)
        except Reject:
            self.drop_inputs_from(inputs_before)
            raise
        value = self.envs[0][name]
        other = self.envs[1][name]
        if not isinstance(value, torch.Tensor) or not isinstance(other, torch.Tensor):
            raise Reject("not a tensor")
        if value.numel() > MAX_NUMEL or value.dim() > 5 or value.shape != other.shape:
            for env in self.envs:
                del env[name]
            raise Reject("too big")
        self.counter += 1
        self.lines.append(stmt)
        self.values.append(name)
        return name

    def emit_stmt(self, stmt: str) -> None:
        self.run(stmt)
        self.lines.append(stmt)

    def drop_inputs_from(self, count: int) -> None:
        while len(self.specs) > count:
            name = f"a{len(self.specs) - 1}"
            self.specs.pop()
            if self.requires_grad and self.requires_grad[-1] == len(self.specs):
                self.requires_grad.pop()
            self.values.remove(name)
            for env in self.envs:
                del env[name]


def is_float(t: torch.Tensor) -> bool:
    return t.is_floating_point()


def is_int(t: torch.Tensor) -> bool:
    return t.dtype in (torch.int32, torch.int64)


def dtype_name(dtype: torch.dtype) -> str:
    return next(k for k, v in DTYPES.items() if v == dtype)


def broadcasts(a: torch.Size, c: torch.Size) -> bool:
    try:
        torch.broadcast_shapes(a, c)
        return True
    except RuntimeError:
        return False
