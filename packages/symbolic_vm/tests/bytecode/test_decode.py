"""decode agrees with CPython's own view of a code object (dis, co_positions, exception table)."""

from __future__ import annotations

import dis
import types

from symbolic_vm.bytecode import Instr, Position, assemble, decode
from symbolic_vm.bytecode.tables import decode_exception_table


def test_decoded_handlers_match_dis_exception_entries() -> None:
    def f(x: int) -> object:
        try:
            with open(__file__) as fh:
                return fh.read(x)
        except OSError as e:
            return e
        finally:
            x += 1

    items = decode(f.__code__)
    theirs = [
        (e.start, e.end, e.target, e.depth, e.lasti)
        for e in dis.Bytecode(f.__code__).exception_entries
    ]
    ours = [
        (e.start * 2, e.end * 2, e.target * 2, e.depth, e.lasti)
        for e in decode_exception_table(f.__code__.co_exceptiontable)
    ]
    assert ours == theirs
    covered = sorted(i.offset for i in items if isinstance(i, Instr) and i.handler is not None)
    assert covered and all(
        any(start <= off < end for start, end, *_ in theirs) for off in covered if off is not None
    )
    assert assemble(items, template=f.__code__) == f.__code__


def test_positions_of_decoded_instructions_are_cpythons() -> None:
    def f(a: int, b: int) -> int:
        return (a
                + b)  # fmt: skip

    items = [i for i in decode(f.__code__) if isinstance(i, Instr)]
    code: types.CodeType = f.__code__
    by_offset = {ins.offset: ins.positions for ins in dis.get_instructions(code)}
    for ins in items:
        p = by_offset[ins.offset]
        assert ins.position == Position(p.lineno, p.end_lineno, p.col_offset, p.end_col_offset)
