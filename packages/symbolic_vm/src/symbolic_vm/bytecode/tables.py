"""The 3.11+ side tables: the exception table and the PEP 626/657 locations table.

Both are byte strings of small variable-length integers; offsets and lengths are in code units
(two bytes each).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import attrs

from symbolic_vm.bytecode.errors import AssemblyError, DecodeError
from symbolic_vm.bytecode.instr import Position

__all__ = [
    "ExceptionTableEntry",
    "decode_exception_table",
    "encode_exception_table",
    "encode_locations",
]


@attrs.frozen
class ExceptionTableEntry:
    """One exception-table row: code units ``[start, end)`` go to ``target`` at stack ``depth``."""

    start: int
    end: int
    target: int
    depth: int
    lasti: bool


# Exception table items: 6-bit groups, most significant first; bit 6 says another group follows,
# bit 7 marks the first byte of an entry.
_CONTINUE = 0x40
_ENTRY_START = 0x80


def _read_item(data: bytes, pos: int) -> tuple[int, int]:
    value = 0
    while True:
        if pos >= len(data):
            raise DecodeError("truncated exception table")
        byte = data[pos]
        pos += 1
        value = (value << 6) | (byte & 0x3F)
        if not byte & _CONTINUE:
            return value, pos


def decode_exception_table(data: bytes) -> list[ExceptionTableEntry]:
    """Parse ``co_exceptiontable`` into entries (offsets in code units)."""
    entries: list[ExceptionTableEntry] = []
    pos = 0
    while pos < len(data):
        if not data[pos] & _ENTRY_START:
            raise DecodeError(f"exception table: entry start expected at byte {pos}")
        start, pos = _read_item(data, pos)
        length, pos = _read_item(data, pos)
        target, pos = _read_item(data, pos)
        depth_lasti, pos = _read_item(data, pos)
        depth, lasti = depth_lasti >> 1, bool(depth_lasti & 1)
        entries.append(ExceptionTableEntry(start, start + length, target, depth, lasti))
    return entries


def _write_item(out: bytearray, value: int, first: bool) -> None:
    groups = [value & 0x3F]
    value >>= 6
    while value:
        groups.append(value & 0x3F)
        value >>= 6
    groups.reverse()
    for i, group in enumerate(groups):
        byte = group
        if i < len(groups) - 1:
            byte |= _CONTINUE
        if first and i == 0:
            byte |= _ENTRY_START
        out.append(byte)


def encode_exception_table(entries: Sequence[ExceptionTableEntry]) -> bytes:
    """Encode entries (non-overlapping, sorted, offsets in code units) as ``co_exceptiontable``."""
    out = bytearray()
    for e in entries:
        _write_item(out, e.start, True)
        _write_item(out, e.end - e.start, False)
        _write_item(out, e.target, False)
        _write_item(out, e.depth << 1 | int(e.lasti), False)
    return bytes(out)


# Locations table: each entry starts with 1ccccnnn (code c, covering n+1 code units, at most 8),
# followed by varints: 6-bit groups, least significant first, bit 6 meaning "more follows".
_SHORT_MAX = 9  # codes 0-9: same line, column < 80, width < 16
_ONE_LINE = 10  # codes 10-12: line delta 0-2, columns < 128 in two bytes
_NO_COLUMNS = 13
_LONG = 14
_NONE = 15


def _varint(out: bytearray, value: int) -> None:
    while value >= 0x40:
        out.append((value & 0x3F) | 0x40)
        value >>= 6
    out.append(value)


def _svarint(out: bytearray, value: int) -> None:
    _varint(out, ((-value) << 1 | 1) if value < 0 else value << 1)


def _chunks(size: int) -> Iterator[int]:
    while size > 8:
        yield 8
        size -= 8
    yield size


def encode_locations(
    runs: Sequence[tuple[Position, int]], firstlineno: int, *, merge: bool
) -> bytes:
    """Encode ``co_linetable`` from (position, size in code units) runs, in code order.

    With ``merge`` (CPython 3.12+ does it, 3.11 does not) consecutive runs with the same position
    become one. Runs are split into entries of at most 8 code units, each in the most compact form,
    as CPython's own assembler does; so a decoded code object re-encodes to the same bytes.
    """
    merged: list[tuple[Position, int]] = []
    for pos, size in runs:
        if size <= 0:
            continue
        if merge and merged and merged[-1][0] == pos:
            merged[-1] = (pos, merged[-1][1] + size)
        else:
            merged.append((pos, size))
    out = bytearray()
    prev_line = firstlineno
    for pos, size in merged:
        for n in _chunks(size):
            prev_line = _write_entry(out, pos, n, prev_line)
    return bytes(out)


def _head(out: bytearray, code: int, n: int) -> None:
    out.append(0x80 | code << 3 | (n - 1))


def _write_entry(out: bytearray, pos: Position, n: int, prev_line: int) -> int:
    if pos.lineno is None:
        _head(out, _NONE, n)
        return prev_line
    line = pos.lineno
    delta = line - prev_line
    end_line = pos.end_lineno
    if (end_line is not None and end_line < line) or min(
        pos.col_offset or 0, pos.end_col_offset or 0
    ) < 0:
        raise AssemblyError(f"{pos!r}: ends before it starts, or has a negative column")
    col = -1 if pos.col_offset is None else pos.col_offset
    end_col = -1 if pos.end_col_offset is None else pos.end_col_offset
    if col < 0 or end_col < 0:
        if end_line is None or end_line == line:
            _head(out, _NO_COLUMNS, n)
            _svarint(out, delta)
            return line
    elif end_line == line:
        if delta == 0 and col < 80 and 0 <= end_col - col < 16:
            _head(out, col // 8, n)
            out.append((col % 8) << 4 | (end_col - col))
            return line
        if 0 <= delta < 3 and col < 128 and end_col < 128:
            _head(out, _ONE_LINE + delta, n)
            out.append(col)
            out.append(end_col)
            return line
    _head(out, _LONG, n)
    _svarint(out, delta)
    _varint(out, (line if end_line is None else end_line) - line)
    _varint(out, col + 1)
    _varint(out, end_col + 1)
    return line
