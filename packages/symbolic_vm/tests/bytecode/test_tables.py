"""The exception-table and locations-table encoders against CPython's own decoders."""

from __future__ import annotations

import dis

import pytest

from symbolic_vm.bytecode import Position
from symbolic_vm.bytecode.tables import (
    ExceptionTableEntry,
    decode_exception_table,
    encode_exception_table,
    encode_locations,
)

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is not installed here")
st = hypothesis.strategies


def _entries() -> st.SearchStrategy[list[ExceptionTableEntry]]:
    def build(spans: list[tuple[int, int, int, int, bool]]) -> list[ExceptionTableEntry]:
        out, start = [], 0
        for gap, length, target, depth, lasti in spans:
            start += gap
            out.append(ExceptionTableEntry(start, start + length, target, depth, lasti))
            start += length
        return out

    value = st.integers(0, 1 << 20)
    span = st.tuples(value, st.integers(1, 1 << 20), value, st.integers(0, 1 << 12), st.booleans())
    return st.lists(span, max_size=20).map(build)


@hypothesis.given(_entries())
def test_exception_table_encoding_round_trips(entries: list[ExceptionTableEntry]) -> None:
    assert decode_exception_table(encode_exception_table(entries)) == entries


_line = st.integers(1, 5000)
_col = st.integers(0, 300)


@st.composite
def _positions(draw: st.DrawFn) -> Position:
    kind = draw(st.sampled_from(["none", "no-columns", "one-line", "multi-line"]))
    if kind == "none":
        return Position()
    line = draw(_line)
    if kind == "no-columns":
        return Position(line, line, None, None)
    col = draw(_col)
    if kind == "one-line":
        return Position(line, line, col, col + draw(st.integers(0, 200)))
    return Position(line, line + draw(st.integers(1, 300)), col, draw(_col))


@hypothesis.given(st.lists(st.tuples(_positions(), st.integers(1, 20)), min_size=1, max_size=30))
@hypothesis.settings(max_examples=60, deadline=None)
def test_locations_decoded_by_cpython_give_back_every_position(
    runs: list[tuple[Position, int]],
) -> None:
    # A code object of NOPs, one run of them per position: CPython's co_positions() must give
    # each code unit the position we encoded for it.
    total = sum(n for _, n in runs)
    code = (lambda: None).__code__.replace(
        co_code=bytes([dis.opmap["NOP"], 0]) * total,
        co_linetable=encode_locations(runs, 1, merge=True),
        co_exceptiontable=b"",
        co_firstlineno=1,
    )
    expected = [
        (p.lineno, p.end_lineno, p.col_offset, p.end_col_offset) for p, n in runs for _ in range(n)
    ]
    assert list(code.co_positions()) == expected
