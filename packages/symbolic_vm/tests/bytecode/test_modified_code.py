"""Edited code runs correctly: an inserted prologue, a jump into the middle, resume-style entry."""

from __future__ import annotations

import dis
import sys
import types

import attrs
import pytest
from bytecode_testing import rebuild_function

from symbolic_vm.bytecode import (
    AssemblyError,
    ExceptHandler,
    FreeVar,
    Instr,
    Label,
    Position,
    assemble,
    codegen,
    decode,
    label_indices,
    localsplus_names,
)
from symbolic_vm.bytecode.codegen import (
    binary_op,
    call_global,
    jump,
    load_const,
    load_fast,
    store_fast,
)


def _split_at_resume(items: list[Instr | Label]) -> tuple[list[Instr | Label], list[Instr | Label]]:
    """(everything up to and including the first RESUME, the rest)."""
    for k, item in enumerate(items):
        if isinstance(item, Instr) and item.opname == "RESUME":
            return items[: k + 1], items[k + 1 :]
    raise AssertionError("no RESUME")


def _label_before(items: list[Instr | Label], opname: str) -> Label:
    """The label placed before the first ``opname`` instruction (a loop head has one)."""
    for k, item in enumerate(items):
        if isinstance(item, Instr) and item.opname == opname:
            before = items[k - 1]
            assert isinstance(before, Label), f"{opname} is not a jump target"
            return before
    raise AssertionError(f"no {opname}")


def scaled_sum(x: int, n: int) -> int:
    total = 0
    for i in range(n):
        try:
            total += x // (i - 2)
        except ZeroDivisionError:
            total += 1000
    return total


def test_inserted_prologue_runs_before_the_original_body() -> None:
    # Prologue: x = x * 3. The rest of the function (loop, try/except) is untouched.
    head, rest = _split_at_resume(decode(scaled_sum.__code__))
    prologue = [load_fast("x"), load_const(3), binary_op("*"), store_fast("x")]
    code = assemble([*head, *prologue, *rest], template=scaled_sum.__code__)
    edited = rebuild_function(scaled_sum, code)
    for x, n in [(1, 0), (5, 4), (-7, 6)]:
        assert edited(x, n) == scaled_sum(3 * x, n)


def accumulate(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


def test_jump_into_the_middle_of_a_loop_with_the_iterator_on_the_stack() -> None:
    # Like a resume function: set up the loop's state, push its iterator, jump to FOR_ITER.
    items = decode(accumulate.__code__)
    head, rest = _split_at_resume(items)
    loop_head = _label_before(items, "FOR_ITER")
    entry = [
        load_const(1000),
        store_fast("total"),
        *call_global("range", [[load_const(5)], [load_fast("n")]]),
        Instr("GET_ITER"),
        jump(loop_head),
    ]
    code = assemble([*head, *entry, *rest], template=accumulate.__code__)
    resumed = rebuild_function(accumulate, code)
    for n in (0, 5, 6, 12):
        assert resumed(n) == 1000 + sum(i * i for i in range(5, n))


def guarded_divisions(xs: list[int]) -> list[object]:
    out: list[object] = []
    for x in xs:
        try:
            out.append(12 // x)
        except ZeroDivisionError:
            out.append(None)
    return out


def test_jump_into_a_try_block_keeps_its_exception_handler() -> None:
    # Enter at the division inside the try (with the loop's iterator and the list's append
    # pending on the stack would be too much: enter at the start of the try body instead).
    items = decode(guarded_divisions.__code__)
    head, rest = _split_at_resume(items)
    instrs = [i for i in rest if isinstance(i, Instr)]
    first_guarded = next(i for i in instrs if i.handler is not None and i.opname != "NOP")
    body_label = Label("try_body")
    k = rest.index(first_guarded)
    rest = [*rest[:k], body_label, *rest[k:]]
    # State at that point: out = [] and x bound, the loop iterator (over xs) on the stack.
    entry = [
        Instr("BUILD_LIST", 0),
        store_fast("out"),
        load_fast("xs"),
        Instr("GET_ITER"),
        load_const(0),
        store_fast("x"),
        jump(body_label),
    ]
    code = assemble([*head, *entry, *rest], template=guarded_divisions.__code__)
    resumed = rebuild_function(guarded_divisions, code)
    # First iteration divides by x = 0 (set by the entry) inside the try: the handler must catch.
    assert resumed([3, 0, 4]) == [None, 4, None, 3]


def test_new_exception_region_around_generated_code() -> None:
    # try: return 1 // x  except: return "caught", built from labels and handlers.
    handler = Label("handler")
    h = ExceptHandler(handler, depth=0, lasti=False)
    body = [
        Instr("RESUME", 0),
        Instr("LOAD_CONST", 1, handler=h),
        Instr("LOAD_FAST", "x", handler=h),
        Instr("BINARY_OP", binary_op("//").arg, handler=h),
        Instr("RETURN_VALUE"),
        handler,
        Instr("PUSH_EXC_INFO"),
        Instr("POP_TOP"),
        Instr("POP_EXCEPT"),
        Instr("LOAD_CONST", "caught"),
        Instr("RETURN_VALUE"),
    ]

    def template(x):  # type: ignore[no-untyped-def]
        return x

    code = assemble(body, template=template.__code__)
    f = types.FunctionType(code, {})
    assert f(4) == 0
    assert f(0) == "caught"
    assert sys.exc_info() == (None, None, None)


def test_retargeting_a_jump_changes_the_control_flow() -> None:
    def sign(x: int) -> str:
        if x < 0:
            return "negative"
        return "non-negative"

    items = decode(sign.__code__)
    cond = next(i for i in items if isinstance(i, Instr) and i.is_jump)
    # Jump to the RESUME-following first instruction's label is not possible; instead swap the
    # branch sense by jumping on the opposite condition.
    swapped = {
        "POP_JUMP_IF_FALSE": "POP_JUMP_IF_TRUE",
        "POP_JUMP_FORWARD_IF_FALSE": "POP_JUMP_FORWARD_IF_TRUE",
        "POP_JUMP_IF_TRUE": "POP_JUMP_IF_FALSE",
        "POP_JUMP_FORWARD_IF_TRUE": "POP_JUMP_FORWARD_IF_FALSE",
    }[cond.opname]
    edited_items = [attrs.evolve(cond, opname=swapped) if i is cond else i for i in items]
    edited = rebuild_function(sign, assemble(edited_items, template=sign.__code__))
    assert (edited(-1), edited(1)) == ("non-negative", "negative")


def test_labels_index_the_instruction_they_precede() -> None:
    items = decode(accumulate.__code__)
    where = label_indices(items)
    instrs = [i for i in items if isinstance(i, Instr)]
    assert instrs[where[_label_before(items, "FOR_ITER")]].opname == "FOR_ITER"


def _tmpl() -> types.CodeType:
    def f(x):  # type: ignore[no-untyped-def]
        return x

    return f.__code__


def test_assembler_refuses_a_jump_to_a_label_not_in_the_list() -> None:
    with pytest.raises(AssemblyError, match="label"):
        assemble([Instr("RESUME", 0), jump(Label()), Instr("RETURN_VALUE")], template=_tmpl())


def test_assembler_refuses_a_label_after_the_last_instruction() -> None:
    end = Label()
    with pytest.raises(AssemblyError, match="not placed"):
        assemble([Instr("RESUME", 0), jump(end), end], template=_tmpl())


def test_instructions_validate_their_argument_kind() -> None:
    with pytest.raises(AssemblyError, match="unknown instruction"):
        Instr("NOT_AN_OPCODE")
    with pytest.raises(AssemblyError, match="Label"):
        Instr("JUMP_FORWARD", 3)
    with pytest.raises(AssemblyError, match="name"):
        Instr("LOAD_GLOBAL", 3)
    with pytest.raises(AssemblyError, match="int"):
        Instr("BUILD_TUPLE", "x")
    with pytest.raises(AssemblyError, match="no argument"):
        Instr("POP_TOP", 1)


def test_assembler_refuses_a_backward_for_iter() -> None:
    top = Label()
    items: list[Instr | Label] = [
        Instr("RESUME", 0),
        top,
        Instr("NOP"),
        Instr("FOR_ITER", top),
        Instr("RETURN_VALUE"),
    ]
    with pytest.raises(AssemblyError, match="FOR_ITER"):
        assemble(items, template=_tmpl())


def test_assembler_refuses_separating_yield_value_from_resume() -> None:
    def gen():  # type: ignore[no-untyped-def]
        yield 1

    items = decode(gen.__code__)
    k = next(k for k, i in enumerate(items) if isinstance(i, Instr) and i.opname == "YIELD_VALUE")
    with pytest.raises(AssemblyError, match="directly followed"):
        assemble([*items[: k + 1], Instr("NOP"), *items[k + 1 :]], template=gen.__code__)


def test_big_argument_gets_extended_arg_prefixes() -> None:
    names = [f"v{k}" for k in range(70000)]
    body: list[Instr | Label] = [Instr("RESUME", 0), load_const(None), store_fast(names[-1])]
    body += [load_fast(names[-1]), Instr("RETURN_VALUE")]
    code = assemble(body, template=_tmpl(), co_varnames=tuple(names))
    assert code.co_nlocals == 70000
    assert types.FunctionType(code, {})(0) is None
    # RESUME, LOAD_CONST, then EXTENDED_ARG 0x01, EXTENDED_ARG 0x11, STORE_FAST 0x6F (69999).
    ext = dis.opmap["EXTENDED_ARG"]
    assert list(code.co_code[4:10]) == [ext, 0x01, ext, 0x11, dis.opmap["STORE_FAST"], 0x6F]
    instrs = [i for i in decode(code) if isinstance(i, Instr)]
    assert instrs[2] == store_fast(names[-1])


def test_class_body_with_a_cell_and_a_free_variable_of_the_same_name() -> None:
    source = "def outer():\n    __class__ = 1\n    class X:\n        y = __class__\n"
    source += "        def f(self):\n            return __class__\n    return X\n"
    outer_code = compile(source, "<cls>", "exec").co_consts[0]
    body = next(c for c in outer_code.co_consts if isinstance(c, types.CodeType))
    assert body.co_cellvars == body.co_freevars == ("__class__",)
    items = decode(body)
    args = {i.arg for i in items if isinstance(i, Instr) and i.opname != "LOAD_CONST"}
    assert FreeVar("__class__") in args and "__class__" in args
    assert assemble(items, template=body) == body
    ns: dict[str, object] = {}
    exec(compile(source, "<cls>", "exec"), ns)
    cls = ns["outer"]()  # type: ignore[operator]
    assert cls.y == 1 and cls().f() is cls


def test_localsplus_names_follow_cpythons_slot_numbering() -> None:
    def outer(a, b):  # type: ignore[no-untyped-def]
        c = 1

        def inner():  # type: ignore[no-untyped-def]
            return a + c

        return inner

    for code in (outer.__code__, outer(1, 2).__code__):
        names = localsplus_names(code)
        assert [code._varname_from_oparg(k) for k in range(len(names))] == list(names)


class _Recorder:
    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def __enter__(self) -> str:
        self.log.append(f"enter {self.name}")
        return self.name

    def __exit__(self, et: object, ev: object, tb: object) -> bool:
        self.log.append(f"exit {self.name} {getattr(et, '__name__', None)}")
        return et is KeyError  # suppress KeyError only


def inside_with(log: list[str], fail: bool) -> list[str]:
    with _Recorder(log, "original"):
        log.append("first")
        log.append("second")
        if fail:
            raise KeyError
    log.append("after")
    return log


def test_resuming_inside_a_with_block_runs_its_exit_and_cleanup() -> None:
    # A resume function's shape: re-enter the context manager, then jump into the with body
    # (at the statement appending "second"); the body keeps its exception handlers, so both the
    # normal exit and the exception cleanup of the original code run.
    items = decode(inside_with.__code__)
    head, rest = _split_at_resume(items)
    line = next(
        i.lineno
        for i in rest
        if isinstance(i, Instr) and i.opname == "LOAD_CONST" and i.arg == "second"
    )
    k = next(k for k, i in enumerate(rest) if isinstance(i, Instr) and i.lineno == line)
    assert rest[k].handler is not None  # inside the with block
    resume_at = Label("second")
    rest = [*rest[:k], resume_at, *rest[k:]]
    manager = call_global("_Recorder", [[load_fast("log")], [load_const("resumed")]])
    entry = [*codegen.enter_with(manager), jump(resume_at)]
    code = assemble([*head, *entry, *rest], template=inside_with.__code__)
    resumed = rebuild_function(inside_with, code)
    assert resumed([], False) == ["enter resumed", "second", "exit resumed None", "after"]
    assert resumed([], True) == ["enter resumed", "second", "exit resumed KeyError", "after"]


def test_assembler_refuses_a_label_placed_twice() -> None:
    twice = Label("twice")
    items: list[Instr | Label] = [Instr("RESUME", 0), twice, load_const(None), twice]
    items.append(Instr("RETURN_VALUE"))
    with pytest.raises(AssemblyError, match="placed twice"):
        assemble(items, template=_tmpl())


def test_assembler_refuses_stack_underflow() -> None:
    items: list[Instr | Label] = [Instr("RESUME", 0), Instr("POP_TOP"), Instr("RETURN_VALUE")]
    with pytest.raises(AssemblyError, match="underflow"):
        assemble(items, template=_tmpl())


def test_assembler_refuses_flags_on_an_opcode_without_them() -> None:
    items: list[Instr | Label] = [
        Instr("RESUME", 0),
        Instr("LOAD_FAST", "x", flags=1),
        Instr("RETURN_VALUE"),
    ]
    with pytest.raises(AssemblyError, match="no flags"):
        assemble(items, template=_tmpl())


def test_stack_size_counts_the_deepest_path_and_handler_entry() -> None:
    # Straight line: three pushes deep. A handler entered with lasti: depth + lasti + exception.
    deep = [
        Instr("RESUME", 0),
        load_const(1),
        load_const(2),
        load_const(3),
        Instr("BUILD_TUPLE", 3),
        Instr("RETURN_VALUE"),
    ]
    assert assemble(deep, template=_tmpl()).co_stacksize == 3
    handler = Label()
    h = ExceptHandler(handler, depth=2, lasti=True)
    guarded = [
        Instr("RESUME", 0),
        load_const(1),
        load_const(2),
        Instr("NOP", handler=h),
        Instr("BUILD_TUPLE", 2),
        Instr("RETURN_VALUE"),
        handler,
        Instr("RERAISE", 1),
    ]
    assert assemble(guarded, template=_tmpl()).co_stacksize == 4


def test_assembler_refuses_a_position_ending_before_it_starts() -> None:
    bad = Position(lineno=5, end_lineno=4, col_offset=0, end_col_offset=1)
    items: list[Instr | Label] = [Instr("RESUME", 0), Instr("NOP", position=bad)]
    items += [load_const(None), Instr("RETURN_VALUE")]
    with pytest.raises(AssemblyError, match="ends before it starts"):
        assemble(items, template=_tmpl())


def _pairs(a, b):
    x = a + 1
    y = b + 2
    x, y = y, x
    return x * y, a * b


def test_pairs_whose_locals_move_past_slot_15_are_split_and_run() -> None:
    """3.13 packs two locals into 4 bits each (LOAD_FAST_LOAD_FAST, STORE_FAST_STORE_FAST...);
    new locals placed before them (as resume functions and transformed code add) push them
    past slot 15, where the pair must become its two plain instructions."""
    code = _pairs.__code__
    body = decode(code)
    pairs = [
        i for i in body
        if isinstance(i, Instr) and i.opname in ("LOAD_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST")
    ]
    if sys.version_info >= (3, 13):
        assert pairs, "the compiler emitted no pair here"
    padding = tuple(f"pad{k}" for k in range(16))
    names = (*code.co_varnames[: code.co_argcount], *padding, *code.co_varnames[code.co_argcount :])
    wide = assemble(body, template=code, co_varnames=names)
    left = [
        i.argval for i in dis.get_instructions(wide)
        if i.opname in ("LOAD_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST", "STORE_FAST_LOAD_FAST")
    ]
    assert all(set(names_) <= {"a", "b"} for names_ in left), left  # slots 0 and 1 only
    assert rebuild_function(_pairs, wide)(3, 4) == _pairs(3, 4)
