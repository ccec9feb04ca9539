"""Resuming a generator made while tracing (``next()``, ``send()``, ``throw()``): its frame
interpreted up to the next ``yield``. Kept apart from the operations that use it (iteration,
``yield from``), which re-export it as ``operations.generator_next``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from symbolic_vm.errors import TracedException, Unsupported, leaving_generator
from symbolic_vm.values import ConstVar, GeneratorVar, ObjectVar, Var

if TYPE_CHECKING:
    from symbolic_vm.output import Output


def generator_next(
    out: Output, gen: GeneratorVar, sent: Var | None = None, *, thrown: Var | None = None
) -> Var | None:
    """Resume ``gen`` up to its next yield: the value, or None once it has returned.

    ``sent``: the value of the paused ``yield`` expression (``gen.send(sent)``); None or
    ``ConstVar(None)`` is what ``next()`` sends. ``thrown``: an exception (the VM's object)
    raised at the paused ``yield`` instead (``gen.throw(exc)``; the generator must be paused).
    """
    box = gen.box
    if thrown is not None:
        if not box.started or box.done:
            raise Unsupported("throw() into a generator that is not paused at a yield")
        box.frame.thrown = TracedException(thrown)
    sends_value = sent is not None and not (isinstance(sent, ConstVar) and sent.value is None)
    if sends_value and not box.started:
        # eager raises TypeError here: let the frame run eagerly and raise it
        raise Unsupported("send() of a value into a just-started generator")
    if box.done:
        return None
    out.inlined_calls += 1  # user code ran: a graph break cannot undo it
    frame = box.frame
    if sends_value:
        frame.stack[-1] = sent  # YIELD_VALUE left None there for the resumption
    box.started = True
    try:
        value: Var = frame.run()
    except TracedException as raised:
        box.done = True
        error = leaving_generator(raised.exception, frame.code.co_flags)
        if error is not raised.exception:  # 3.11 (3.12+ converted it in the frame's bytecode)
            raise TracedException(ObjectVar(error)) from None
        raise
    if frame.returned:
        box.done = True
        box.result = value
        return None
    return value


__all__ = ["generator_next"]
