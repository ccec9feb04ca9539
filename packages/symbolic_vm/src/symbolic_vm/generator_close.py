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
    if target is None:
        return False
    first = frame.instructions[frame.index_of[target]]
    # 3.12+ wraps every generator body in a handler turning StopIteration into RuntimeError:
    # GeneratorExit passes through it untouched.
    return not (first.opname == "CALL_INTRINSIC_1" and "STOPITERATION" in first.argrepr)
