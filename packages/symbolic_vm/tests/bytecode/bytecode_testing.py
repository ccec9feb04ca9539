"""Helpers shared by the bytecode toolkit tests: the stdlib corpus, listing normalisation."""

from __future__ import annotations

import os
import sysconfig
import types
from collections.abc import Iterator

from symbolic_vm.bytecode import Instr, Label, label_indices

# Directories of the standard library left out of the corpus: third-party code, and the test suites
# (large and slow to compile on a shared machine; the library proper gives ~20k code objects).
_SKIPPED_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}


def stdlib_files() -> list[str]:
    """Every .py file of the running interpreter's standard library, tests excluded, sorted."""
    root = sysconfig.get_paths()["stdlib"]
    found: list[str] = []
    for here, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS)
        found.extend(os.path.join(here, f) for f in files if f.endswith(".py"))
    return sorted(found)


def compile_file(path: str) -> types.CodeType | None:
    """The module code object of a source file, or None when it does not compile on this version."""
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        return compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return None


def walk_code(code: types.CodeType) -> Iterator[types.CodeType]:
    """A code object and every code object nested in its constants, recursively."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from walk_code(const)


def normalized(items: list[Instr | Label]) -> list[tuple[object, ...]]:
    """Instructions as comparable tuples: labels replaced by the index of the instruction they mark.

    Offsets are dropped, so two listings compare equal when only their layout differs.
    """
    where = label_indices(items)

    def target(label: Label) -> int:
        return where[label]

    out: list[tuple[object, ...]] = []
    for item in items:
        if isinstance(item, Label):
            continue
        arg = target(item.arg) if isinstance(item.arg, Label) else item.arg
        handler = None
        if item.handler is not None:
            h = item.handler
            handler = (target(h.target), h.depth, h.lasti)
        out.append((item.opname, arg, item.flags, item.position, handler))
    return out


def rebuild_function(fn: types.FunctionType, code: types.CodeType) -> types.FunctionType:
    """A copy of ``fn`` running ``code`` (same globals, defaults and closure)."""
    new = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    return new


# Test modules of CPython's own suite that are dense in unusual syntax (match, except*, async,
# with, comprehensions, settrace control-flow corner cases): a second corpus, beside the library.
SYNTAX_HEAVY_TESTS = (
    "patma grammar coroutines generators exceptions except_star with listcomps setcomps dictcomps "
    "contextlib contextlib_async asyncgen scope super compile peepholer opcodes "
    "positional_only_arg keywordonlyarg unpack_ex fstring named_expressions type_params "
    "dataclasses sys_settrace raise exception_group typing enum inspect"
).split()


def syntax_heavy_test_files() -> list[str]:
    """Paths of the SYNTAX_HEAVY_TESTS modules that exist in this interpreter's Lib/test."""
    test_dir = os.path.join(sysconfig.get_paths()["stdlib"], "test")
    found = []
    for name in SYNTAX_HEAVY_TESTS:
        for path in (
            os.path.join(test_dir, f"test_{name}.py"),
            os.path.join(test_dir, f"test_{name}", "__init__.py"),
        ):
            if os.path.exists(path):
                found.append(path)
    return found


_NO_FALLTHROUGH = {
    "JUMP_FORWARD",
    "JUMP_BACKWARD",
    "JUMP_BACKWARD_NO_INTERRUPT",
    "RETURN_VALUE",
    "RETURN_CONST",
    "RAISE_VARARGS",
    "RERAISE",
}


def has_dead_code(items: list[Instr | Label]) -> bool:
    """True when some instruction cannot be reached from the entry (by jumps, fall-through or
    exception handlers of reached instructions)."""
    where = label_indices(items)
    instrs = [i for i in items if isinstance(i, Instr)]
    seen = {0}
    todo = [0]
    while todo:
        k = todo.pop()
        ins = instrs[k]
        nxt: list[int] = []
        if isinstance(ins.arg, Label):
            nxt.append(where[ins.arg])
        if ins.handler is not None:
            nxt.append(where[ins.handler.target])
        if ins.opname not in _NO_FALLTHROUGH and k + 1 < len(instrs):
            nxt.append(k + 1)
        for n in nxt:
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return len(seen) < len(instrs)
