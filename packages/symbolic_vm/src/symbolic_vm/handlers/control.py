"""Jumps, branches, loops, returns and with-blocks."""

from __future__ import annotations

import dis

import torch

from symbolic_vm import attributes, object_model
from symbolic_vm import operations as ops
from symbolic_vm.calls import call
from symbolic_vm.errors import Unsupported
from symbolic_vm.generator_close import close_at_frame_end
from symbolic_vm.interpreter import RUNNING, Interpreter, ReturnSignal, YieldSignal, handler
from symbolic_vm.torch_calls import (
    InferenceModeVar,
    enter_autocast,
    enter_grad_mode,
    enter_inference_mode,
)
from symbolic_vm.values import (
    STALE_ITERATOR,
    AutocastVar,
    ConstVar,
    GeneratorVar,
    GradModeVar,
    IteratorVar,
    ObjectVar,
    Var,
)


@handler("JUMP", versions=(3.12, 3.13))
@handler("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT")
def JUMP_FORWARD(vm: Interpreter, inst: dis.Instruction) -> None:
    vm.jump_to(inst.argval)


def _truth(vm: Interpreter, var: Var) -> bool:
    found = object_model.truth(vm, var)
    return ops.truth(vm.out, var) if found is None else found


def _branch(vm: Interpreter, inst: dis.Instruction, jump_if: bool) -> None:
    if _truth(vm, vm.pop()) == jump_if:
        vm.jump_to(inst.argval)


@handler("POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_TRUE", versions=(3.11,))
@handler("POP_JUMP_IF_TRUE", versions=(3.12, 3.13))
def POP_JUMP_IF_TRUE(vm: Interpreter, inst: dis.Instruction) -> None:
    _branch(vm, inst, True)


@handler("POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE", versions=(3.11,))
@handler("POP_JUMP_IF_FALSE", versions=(3.12, 3.13))
def POP_JUMP_IF_FALSE(vm: Interpreter, inst: dis.Instruction) -> None:
    _branch(vm, inst, False)


def _is_none(vm: Interpreter) -> bool:
    value = vm.pop()
    return ops.identical(vm.out, value, ConstVar(None))


@handler("POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NONE", versions=(3.11,))
@handler("POP_JUMP_IF_NONE", versions=(3.12, 3.13))
def POP_JUMP_IF_NONE(vm: Interpreter, inst: dis.Instruction) -> None:
    if _is_none(vm):
        vm.jump_to(inst.argval)


@handler("POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE", versions=(3.11,))
@handler("POP_JUMP_IF_NOT_NONE", versions=(3.12, 3.13))
def POP_JUMP_IF_NOT_NONE(vm: Interpreter, inst: dis.Instruction) -> None:
    if not _is_none(vm):
        vm.jump_to(inst.argval)


@handler("JUMP_IF_TRUE_OR_POP", versions=(3.11,))
def JUMP_IF_TRUE_OR_POP(vm: Interpreter, inst: dis.Instruction) -> None:
    if _truth(vm, vm.peek()):
        vm.jump_to(inst.argval)
    else:
        vm.pop()


@handler("JUMP_IF_FALSE_OR_POP", versions=(3.11,))
def JUMP_IF_FALSE_OR_POP(vm: Interpreter, inst: dis.Instruction) -> None:
    if not _truth(vm, vm.peek()):
        vm.jump_to(inst.argval)
    else:
        vm.pop()


@handler("GET_ITER")
def GET_ITER(vm: Interpreter, inst: dis.Instruction) -> None:
    obj = vm.pop()
    found = object_model.iterate(vm, obj)
    vm.push(ops.make_iterator(vm.out, obj if found is None else found))


@handler("FOR_ITER")
def FOR_ITER(vm: Interpreter, inst: dis.Instruction) -> None:
    iterator = vm.peek()
    if isinstance(iterator, GeneratorVar):
        value = ops.generator_next(vm.out, iterator)
        if value is not None:
            vm.push(value)
            return
    elif not isinstance(iterator, IteratorVar):
        raise Unsupported(f"FOR_ITER over {ops.describe(iterator)}")
    elif iterator.box.stale():
        raise Unsupported(STALE_ITERATOR)
    elif iterator.box.index < len(iterator.box.items):
        vm.push(iterator.box.items[iterator.box.index])
        iterator.box.index += 1
        return
    if isinstance(iterator, IteratorVar):
        # Exhausted for good, even if the list it iterates grows later (as a list iterator).
        iterator.box.finish()
    vm.pop()
    vm.jump_to(inst.argval)
    # 3.12: an exhausted FOR_ITER also skips the END_FOR at its target; 3.13 skips the
    # END_FOR and the POP_TOP after it.
    if vm.next_instruction().opname == "END_FOR":
        vm.ip += 2 if RUNNING >= (3, 13) else 1


@handler("END_FOR", versions=(3.12,))
def END_FOR(vm: Interpreter, inst: dis.Instruction) -> None:
    vm.pop()
    vm.pop()


@handler("END_FOR", versions=(3.13,))
def END_FOR_313(vm: Interpreter, inst: dis.Instruction) -> None:
    vm.pop()


@handler("TO_BOOL", versions=(3.13,))
def TO_BOOL(vm: Interpreter, inst: dis.Instruction) -> None:
    """3.13's truth test before a branch or ``not``; on a tensor's data it breaks the graph
    (the residual code runs TO_BOOL and the jump after it together: see
    symbolic_vm.breaks.resume). A user object's ``__bool__``/``__len__`` is traced, as by the
    branch 3.11 tests it in."""
    vm.push(ConstVar(_truth(vm, vm.pop())))


@handler("RETURN_VALUE")
def RETURN_VALUE(vm: Interpreter, inst: dis.Instruction) -> None:
    if vm.is_root:
        close_at_frame_end(vm)
    raise ReturnSignal(vm.pop())


@handler("RETURN_CONST", versions=(3.12, 3.13))
def RETURN_CONST(vm: Interpreter, inst: dis.Instruction) -> None:
    if vm.is_root:
        close_at_frame_end(vm)
    raise ReturnSignal(vm.out.wrap(inst.argval, None))


@handler("BEFORE_WITH")
def BEFORE_WITH(vm: Interpreter, inst: dis.Instruction) -> None:
    manager = vm.pop()
    if isinstance(manager, AutocastVar):
        vm.push(enter_autocast(vm.out, manager))
        vm.push(ConstVar(None))
        return

    if isinstance(manager, InferenceModeVar):
        vm.push(enter_inference_mode(vm.out, manager))
        vm.push(ConstVar(None))
        return
    if isinstance(manager, ObjectVar) and type(manager.value) in (torch.no_grad, torch.enable_grad):
        # A real manager object (a resume function re-entering a block after a graph break).
        vm.out.depend(manager)
        manager = GradModeVar(type(manager.value) is torch.enable_grad)
    if isinstance(manager, GradModeVar):
        vm.push(enter_grad_mode(vm.out, manager))
        vm.push(ConstVar(None))
        return
    exit_fn = attributes.getattr_var(vm, manager, "__exit__")
    entered = call(vm, attributes.getattr_var(vm, manager, "__enter__"), [], {})
    vm.out.with_entries[id(exit_fn)] = (exit_fn, len(vm.out.builder.graph.nodes))
    vm.push(exit_fn)
    vm.push(entered)


@handler("RETURN_GENERATOR")
def RETURN_GENERATOR(vm: Interpreter, inst: dis.Instruction) -> None:
    """A generator's first instruction: its frame is already set aside (calls.inline)."""
    vm.push(ConstVar(None))


@handler("YIELD_VALUE")
def YIELD_VALUE(vm: Interpreter, inst: dis.Instruction) -> None:
    """Suspend the generator's interpreter; on resumption the sent value is on the stack, as
    CPython leaves it (None here; ``send(v)`` replaces it, see ``ops.generator_next``)."""
    value = vm.pop()
    vm.push(ConstVar(None))
    raise YieldSignal(value)


@handler("GET_YIELD_FROM_ITER")
def GET_YIELD_FROM_ITER(vm: Interpreter, inst: dis.Instruction) -> None:
    obj = vm.pop()
    found = object_model.iterate(vm, obj)  # a user iterable: its __iter__, as GET_ITER
    vm.push(ops.make_iterator(vm.out, obj if found is None else found))


def _delegate(vm: Interpreter, receiver: Var, sent: Var) -> tuple[Var | None, Var]:
    """One step of ``yield from receiver``: (the value it yields, or None when it has ended,
    and then its return value)."""
    if isinstance(receiver, GeneratorVar):
        value = ops.generator_next(vm.out, receiver, sent)
        return value, receiver.box.result or ConstVar(None)
    if not (isinstance(sent, ConstVar) and sent.value is None):
        raise Unsupported(f"send() of a value through yield from {ops.describe(receiver)}")
    if isinstance(receiver, IteratorVar):
        box = receiver.box
        if box.stale():
            raise Unsupported(STALE_ITERATOR)
        if box.index < len(box.items):
            box.index += 1
            return box.items[box.index - 1], ConstVar(None)
        box.finish()
        return None, ConstVar(None)
    raise Unsupported(f"yield from {ops.describe(receiver)}")


@handler("SEND", versions=(3.11,))
def SEND(vm: Interpreter, inst: dis.Instruction) -> None:
    """3.11: pops the sent value; on the end, the return value replaces the receiver."""
    sent = vm.pop()
    value, result = _delegate(vm, vm.peek(), sent)
    if value is None:
        vm.stack[-1] = result
        vm.jump_to(inst.argval)
    else:
        vm.push(value)


@handler("SEND", versions=(3.12, 3.13))
def SEND_312(vm: Interpreter, inst: dis.Instruction) -> None:
    """3.12: the sent value is replaced by the yielded one, or by the return value before the
    jump to END_SEND (which drops the receiver)."""
    value, result = _delegate(vm, vm.peek(2), vm.peek())
    if value is None:
        vm.stack[-1] = result
        vm.jump_to(inst.argval)
    else:
        vm.stack[-1] = value


@handler("END_SEND", versions=(3.12, 3.13))
def END_SEND(vm: Interpreter, inst: dis.Instruction) -> None:
    value = vm.pop()
    vm.pop()
    vm.push(value)
