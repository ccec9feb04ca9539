"""Where a trace stopped, and what capture() does about it: records, no logic.

The interpreter's root frame ends a trace with a :class:`Stop` (it can break before an
instruction) or a :class:`Retrace` (an instruction failed after changing the trace).
symbolic_vm.breaks.policy.decide turns a Stop into one :data:`Decision`:

- :class:`Resume`: the graph ends before the instruction, the residual code runs it (or, at a
  region's start, the region) and resume functions run the rest;
- :class:`RunRegion`: trace again and stop at the start of a loop/try/with statement, or of the
  statement(s) holding the break, which then run as bytecode;
- :class:`RunEagerly`: no break is possible; the frame runs eagerly.

capture() loops on Retrace and RunRegion (at most one of each, in that order: four traces).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from symbolic_vm.breaks.region import Region
from symbolic_vm.breaks.slots import Slot
from symbolic_vm.errors import Unsupported

if TYPE_CHECKING:
    import ast

    from symbolic_vm.codegen import Rebuilder
    from symbolic_vm.values import Var

__all__ = ["Decision", "Resume", "Retrace", "RunEagerly", "RunRegion", "Stop"]


@attrs.frozen(eq=False)
class Stop:
    """The root frame stopped before the instruction at ``offset``, which failed with ``error``
    (or is ``region``'s start: the region runs as bytecode).

    ``stack`` and ``local_vars`` are the VM state right before it; nothing the failed
    instruction did is kept (it changed no graph, effect, box or cell: see Interpreter.run).
    """

    offset: int
    stack: list[Var]
    local_vars: dict[str, Var]
    error: Unsupported
    region: Region | None = None


@attrs.frozen(eq=False)
class Retrace:
    """A root instruction failed after changing the trace (an inlined call ran part way): trace
    the frame again and stop right before root step ``step`` (the same instruction: the trace
    is deterministic), where nothing has been changed yet."""

    step: int
    error: Unsupported


@attrs.frozen(eq=False)
class Resume:
    """Break at the stop: the graph's outputs and side effects (``rebuilder``, ``writes``), the
    prologue helper's return expression, and how each stack slot and live local crosses."""

    rebuilder: Rebuilder
    writes: list[ast.stmt]
    return_expr: ast.expr
    stack: list[Slot]
    live: list[tuple[str, Slot]]
    # Live locals passed as the tuple of an iterator's items left (the resume function makes
    # the iterator again: see ResumeBuilder.resume_at).
    iterated: tuple[str, ...] = ()


@attrs.frozen(eq=False)
class RunRegion:
    """Trace again, stop at ``region``'s start and run the region as bytecode; ``error`` is the
    break's reason, saying so (explain() reports it)."""

    region: Region
    error: Unsupported


@attrs.frozen(eq=False)
class RunEagerly:
    """No break is possible here: the frame runs eagerly; ``error`` says why."""

    error: Unsupported


Decision = Resume | RunRegion | RunEagerly
