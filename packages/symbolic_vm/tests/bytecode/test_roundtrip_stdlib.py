"""decode + assemble reproduces every code object of the standard library, byte for byte."""

from __future__ import annotations

import dis
import sys
import types

import pytest
from bytecode_testing import (
    compile_file,
    has_dead_code,
    normalized,
    stdlib_files,
    syntax_heavy_test_files,
    walk_code,
)

from symbolic_vm.bytecode import MUST_BE_FOLLOWED_BY, Instr, Label, assemble, decode

_FIELDS = (
    "co_code",
    "co_exceptiontable",
    "co_linetable",
    "co_consts",
    "co_names",
    "co_varnames",
    "co_cellvars",
    "co_freevars",
    "co_nlocals",
    "co_stacksize",
    "co_flags",
    "co_argcount",
    "co_posonlyargcount",
    "co_kwonlyargcount",
    "co_firstlineno",
    "co_qualname",
)


def _differences(a: types.CodeType, b: types.CodeType) -> list[str]:
    return [f for f in _FIELDS if getattr(a, f) != getattr(b, f)]


def _chunk(files: list[str], n: int) -> list[list[str]]:
    return [files[i::n] for i in range(n)]


# The corpus is split in a fixed number of slices so a failure names a small set of files and the
# run stays one test per slice (fast to collect).
_SLICES = 16


@pytest.mark.parametrize("part", range(_SLICES))
def test_stdlib_code_objects_reassemble_byte_identical(part: int) -> None:
    files = _chunk(stdlib_files(), _SLICES)[part]
    checked = 0
    failures: list[str] = []
    for path in files:
        top = compile_file(path)
        if top is None:
            continue
        for code in walk_code(top):
            new = assemble(decode(code), template=code)
            checked += 1
            diff = _differences(code, new)
            if diff or new != code:
                failures.append(f"{path}:{code.co_firstlineno} {code.co_qualname}: {diff}")
    assert not failures, f"{len(failures)} of {checked} differ, first: {failures[:5]}"
    assert checked > 500


def test_syntax_heavy_cpython_test_modules_reassemble_identically() -> None:
    """CPython's own tests of match, except*, async, with... reassemble unchanged.

    One allowance: where the compiler left unreachable instructions, it sized the stack before
    removing dead code, so its co_stacksize may exceed ours (which covers every reachable path).
    """
    paths = syntax_heavy_test_files()
    if not paths:
        # Debian/Ubuntu's python3 ships without Lib/test (the device machine's does).
        pytest.skip("this interpreter has no Lib/test modules to reassemble")
    checked = dead_code_smaller = 0
    failures: list[str] = []
    for path in paths:
        top = compile_file(path)
        if top is None:
            continue
        for code in walk_code(top):
            items = decode(code)
            new = assemble(items, template=code)
            checked += 1
            diff = _differences(code, new)
            if diff == ["co_stacksize"] and new.co_stacksize < code.co_stacksize:
                if has_dead_code(items):
                    dead_code_smaller += 1
                    continue
            if diff:
                failures.append(f"{path}:{code.co_firstlineno} {code.co_qualname}: {diff}")
    assert not failures, f"{len(failures)} of {checked} differ, first: {failures[:5]}"
    assert checked > 5000
    assert dead_code_smaller < checked // 200


def _spread_nops(items: list[Instr | Label], every: int) -> list[Instr | Label]:
    """Insert a NOP (same position and handler as its predecessor) after every ``every`` instrs."""
    out: list[Instr | Label] = []
    count = 0
    for item in items:
        out.append(item)
        if isinstance(item, Instr) and item.opname not in MUST_BE_FOLLOWED_BY:
            count += 1
            if count % every == 0:
                out.append(Instr("NOP", position=item.position, handler=item.handler))
    return out


@pytest.mark.parametrize("part", range(0, _SLICES, 4))
def test_stdlib_code_objects_relaid_out_decode_to_the_same_program(part: int) -> None:
    """Shifting every offset (NOPs between instructions) keeps jumps, handlers and lines right.

    The re-laid-out code is decoded again and must list the same program as the original plus the
    NOPs; the jump offsets, EXTENDED_ARG prefixes, exception table and line table were all
    recomputed for the new layout.
    """
    files = _chunk(stdlib_files(), _SLICES)[part]
    checked = 0
    for path in files:
        top = compile_file(path)
        if top is None:
            continue
        for code in walk_code(top):
            expected = _spread_nops(decode(code), 3)
            new = assemble(expected, template=code)
            assert normalized(decode(new)) == normalized(expected), code.co_qualname
            assert new.co_stacksize == code.co_stacksize, code.co_qualname
            assert len(list(dis.get_instructions(new))) > 0
            checked += 1
    assert checked > 500


def test_decode_folds_extended_arg_and_drops_caches() -> None:
    source = "\n".join(f"f({i})" for i in range(300)) + "\nz = 299.5"
    code = compile(source, "<big>", "exec")
    items = decode(code)
    instrs = [i for i in items if isinstance(i, Instr)]
    assert all(i.opname not in ("EXTENDED_ARG", "CACHE") for i in instrs)
    loaded = [i.arg for i in instrs if i.opname == "LOAD_CONST"]
    assert loaded[:300] == list(range(300)) and 299.5 in loaded  # index 300 needs EXTENDED_ARG
    assert dis.opmap["EXTENDED_ARG"] in code.co_code[::2]
    assert assemble(items, template=code) == code


def test_decoded_jumps_target_labels_matching_dis_targets() -> None:
    def f(xs: list[int]) -> int:
        total = 0
        for x in xs:
            if x > 3:
                continue
            while x:
                x -= 1
                total += x
        return total

    items = decode(f.__code__)
    offsets_of_labels: dict[Label, int] = {}
    pending: list[Label] = []
    for item in items:
        if isinstance(item, Label):
            pending.append(item)
        else:
            for lab in pending:
                assert item.offset is not None
                offsets_of_labels[lab] = item.offset
            pending = []
    ours = [
        (i.offset, offsets_of_labels[i.arg])
        for i in items
        if isinstance(i, Instr) and isinstance(i.arg, Label)
    ]
    theirs = [
        (i.offset, i.argval)
        for i in dis.get_instructions(f.__code__)
        if i.opcode in dis.hasjrel or i.opcode in dis.hasjabs
    ]
    assert ours == theirs


@pytest.mark.skipif(sys.version_info < (3, 12), reason="LOAD_ATTR's method bit is 3.12+")
def test_load_attr_method_bit_and_load_global_null_bit_are_flags() -> None:
    def f(o: list[int]) -> int:
        o.append(1)
        return len(o.copy)  # type: ignore[arg-type]

    instrs = [i for i in decode(f.__code__) if isinstance(i, Instr)]
    attrs_ = [(i.arg, i.flags) for i in instrs if i.opname == "LOAD_ATTR"]
    assert attrs_ == [("append", 1), ("copy", None)]
    assert [(i.arg, i.flags) for i in instrs if i.opname == "LOAD_GLOBAL"] == [("len", 1)]
