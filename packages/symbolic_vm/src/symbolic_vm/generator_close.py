"""Closing generators made while tracing, as CPython does when their last reference dies.

A generator still suspended inside a ``try``/``with`` of its own runs the handler (its
``finally``, its manager's ``__exit__``) when it is closed: in eager, as soon as nothing refers
to it any more. For one held in a local of the compiled frame that is when the frame ends, after
everything else the frame did; so the root frame's return closes those, in the order CPython
clears the frame's locals, by throwing GeneratorExit into their traced frames. One whose last
reference went away while the frame was still running (a temporary, a call's local, a rebound
name) would have run its handler at a point the trace no longer knows: the trace stops there
and the frame runs eagerly. One that outlives the frame (returned, stored) cannot be rebuilt by
the output code at all, which runs such a frame eagerly too.
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING

from symbolic_vm.errors import FrameRunsEagerly, TracedException, Unsupported, throw
from symbolic_vm.values import GeneratorVar

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter

__all__ = ["close_at_frame_end", "close_generator"]


def close_at_frame_end(root: Interpreter) -> None:
    """At the root frame's return: run the handlers of its suspended generators, in order."""
    pending = [gen for gen in root.made_generators if _handler_pending(gen)]
    if not pending:
        return
    order = {name: k for k, name in enumerate(root.code.co_varnames + root.code.co_cellvars)}
    held: list[GeneratorVar] = []
    for _, var in sorted(root.locals.items(), key=lambda item: order.get(item[0], 1 << 30)):
        if isinstance(var, GeneratorVar) and all(var.box is not h.box for h in held):
            held.append(var)
    for gen in pending:
        if all(gen.box is not h.box for h in held):
            raise FrameRunsEagerly(
                "a generator suspended inside its own try/with is dropped while the frame "
                "runs (eager runs its finally/__exit__ right then)"
            )
    for gen in held:
        if _handler_pending(gen):
            try:
                close_generator(gen)
            except FrameRunsEagerly:
                raise
            except Unsupported as exc:
                # A break inside the handler: a break before the return would skip it.
                raise FrameRunsEagerly(f"closing a generator at the frame's end: {exc.reason}") \
                    from None


def close_generator(gen: GeneratorVar) -> None:
    """``gen.close()`` on a traced generator: GeneratorExit raised at its paused yield."""
    box = gen.box
    if not box.started or box.done:
        box.done = True
        return
    frame = box.frame
    paused_at = frame.instructions[frame.ip - 1].offset
    box.done = True
    if not frame.catch_at(paused_at, throw(GeneratorExit)):
        return
    try:
        frame.run()
    except TracedException as raised:
        if isinstance(raised.exception, GeneratorExit):
            return
        raise FrameRunsEagerly(
            f"closing a generator raised {type(raised.exception).__name__} in its handler"
        ) from None
    if not frame.returned:
        raise FrameRunsEagerly("a generator yielded again while being closed")


def _handler_pending(gen: GeneratorVar) -> bool:
    """Whether closing ``gen`` now would run code of its own (a finally, an except, __exit__)."""
    box = gen.box
    if not box.started or box.done:
        return False
    frame = box.frame
    paused_at = frame.instructions[frame.ip - 1].offset
    target = frame.handler_target(paused_at)
    seen: set[int] = set()
    while target is not None and target not in seen:
        seen.add(target)
        insts = frame.instructions
        at = frame.index_of[target]
        first = insts[at]
        # 3.12+ wraps every generator body in a handler turning StopIteration into RuntimeError:
        # GeneratorExit passes through it untouched.
        if first.opname == "CALL_INTRINSIC_1" and "STOPITERATION" in first.argrepr:
            return False
        passes = _passes_through(frame, at)
        if passes is None:
            return True
        target = frame.handler_target(passes)
    return False


def _passes_through(frame: Interpreter, at: int) -> int | None:
    """Where GeneratorExit re-raises from if the handler at ``at`` lets it through untouched.

    Two shapes run no code of the generator's own: ``except E:`` with one builtin-named class
    that GeneratorExit is no instance of (``Sequence.__iter__``'s ``except IndexError``: the
    match fails and the exception is re-raised), and the cleanup block that pops the exception
    state and re-raises. Anything else (a finally, ``__exit__``, a bare ``except``) returns None.
    """
    insts = frame.instructions
    ops = [inst.opname for inst in insts[at : at + 4]]
    if ops[:3] == ["COPY", "POP_EXCEPT", "RERAISE"]:
        return insts[at + 2].offset
    if (
        len(ops) == 4
        and ops[0] == "PUSH_EXC_INFO"
        and ops[1] in ("LOAD_GLOBAL", "LOAD_NAME")
        and ops[2] == "CHECK_EXC_MATCH"
        and ops[3].startswith("POP_JUMP")
        and ops[3].endswith("IF_FALSE")
    ):
        name = insts[at + 1].argval
        cls = frame.f_globals[name] if name in frame.f_globals else vars(builtins).get(name)
        if not isinstance(cls, type) or issubclass(GeneratorExit, cls):
            return None
        miss = frame.instructions[frame.index_of[insts[at + 3].argval]]
        return miss.offset if miss.opname == "RERAISE" else None
    return None
