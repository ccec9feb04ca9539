"""Loads, stores and stack shuffling."""

from __future__ import annotations

import dis
import importlib.util
import sys

from symbolic_vm import attr_stores, attributes
from symbolic_vm import operations as ops
from symbolic_vm.errors import Unsupported
from symbolic_vm.interpreter import RUNNING, Interpreter, handler
from symbolic_vm.side_effects import CellWrite, GlobalWrite
from symbolic_vm.values import NULL, Cell, CellVar, NullVar, ObjectVar, SuperVar, Var


@handler("PRECALL", versions=(3.11,))
@handler("NOP", "RESUME", "EXTENDED_ARG", "CACHE")
def NOP(vm: Interpreter, inst: dis.Instruction) -> None:
    """Nothing to do symbolically (PRECALL's method unpacking is implicit in our call records)."""


@handler("COPY_FREE_VARS")
def COPY_FREE_VARS(vm: Interpreter, inst: dis.Instruction) -> None:
    if vm.is_root:
        return  # the root frame's free variables are read lazily from f_locals
    for name, cell in zip(vm.code.co_freevars, vm.closure, strict=True):
        vm.cells[name] = cell


@handler("MAKE_CELL")
def MAKE_CELL(vm: Interpreter, inst: dis.Instruction) -> None:
    name = inst.argval
    value = vm.load_local(name) if vm.has_local(name) else None
    vm.cells[name] = Cell(value)


@handler("LOAD_FAST_CHECK", versions=(3.12, 3.13))
@handler("LOAD_FAST")
def LOAD_FAST(vm: Interpreter, inst: dis.Instruction) -> None:
    name = inst.argval
    if RUNNING >= (3, 13) and _is_cell_name(vm, name):
        LOAD_CLOSURE(vm, inst)  # 3.13 loads a cell for a closure with LOAD_FAST
    else:
        vm.push(vm.load_local(name))


def _is_cell_name(vm: Interpreter, name: str) -> bool:
    return name in vm.code.co_cellvars or name in vm.code.co_freevars


@handler("LOAD_FAST_LOAD_FAST", versions=(3.13,))
def LOAD_FAST_LOAD_FAST(vm: Interpreter, inst: dis.Instruction) -> None:
    first, second = inst.argval
    vm.push(vm.load_local(first))
    vm.push(vm.load_local(second))


@handler("STORE_FAST_LOAD_FAST", versions=(3.13,))
def STORE_FAST_LOAD_FAST(vm: Interpreter, inst: dis.Instruction) -> None:
    stored, loaded = inst.argval
    _store_fast(vm, stored, vm.pop())
    vm.push(vm.load_local(loaded))


@handler("STORE_FAST_STORE_FAST", versions=(3.13,))
def STORE_FAST_STORE_FAST(vm: Interpreter, inst: dis.Instruction) -> None:
    first, second = inst.argval
    _store_fast(vm, first, vm.pop())
    _store_fast(vm, second, vm.pop())


@handler("LOAD_FAST_AND_CLEAR", versions=(3.12, 3.13))
def LOAD_FAST_AND_CLEAR(vm: Interpreter, inst: dis.Instruction) -> None:
    name = inst.argval
    vm.push(vm.load_local(name) if vm.has_local(name) else NULL)
    vm.delete_local(name)


@handler("STORE_FAST")
def STORE_FAST(vm: Interpreter, inst: dis.Instruction) -> None:
    _store_fast(vm, inst.argval, vm.pop())


def _store_fast(vm: Interpreter, name: str, value: Var) -> None:
    if isinstance(value, NullVar):  # 3.12+ restoring a local unbound before a comprehension
        vm.delete_local(name)
    else:
        vm.store_local(name, value)


@handler("DELETE_FAST")
def DELETE_FAST(vm: Interpreter, inst: dis.Instruction) -> None:
    vm.delete_local(inst.argval)


@handler("LOAD_CONST")
def LOAD_CONST(vm: Interpreter, inst: dis.Instruction) -> None:
    vm.push(vm.out.wrap(inst.argval, None))


@handler("LOAD_GLOBAL", versions=(3.11, 3.12))
def LOAD_GLOBAL(vm: Interpreter, inst: dis.Instruction) -> None:
    if inst.arg is not None and inst.arg & 1:
        vm.push(NULL)
    vm.push(vm.load_global(inst.argval))


@handler("LOAD_GLOBAL", versions=(3.13,))
def LOAD_GLOBAL_313(vm: Interpreter, inst: dis.Instruction) -> None:
    """3.13: the low bit pushes NULL after the global (callable, NULL, args...)."""
    vm.push(vm.load_global(inst.argval))
    if inst.arg is not None and inst.arg & 1:
        vm.push(NULL)


@handler("LOAD_BUILD_CLASS")
def LOAD_BUILD_CLASS(vm: Interpreter, inst: dis.Instruction) -> None:
    """A class statement: symbolic_vm.class_statements answers the call of this builtin."""
    found = vm.f_builtins.get("__build_class__")
    if found is None:
        raise Unsupported("__build_class__ not found")
    vm.push(ObjectVar(found))


@handler("STORE_GLOBAL")
def STORE_GLOBAL(vm: Interpreter, inst: dis.Instruction) -> None:
    if vm.f_globals is not vm.out.f_globals:
        raise Unsupported("writing a global of another module inside a compiled function")
    value = vm.pop()
    vm.out.global_overlay[inst.argval] = value
    vm.out.side_effects.append(GlobalWrite(inst.argval, value))


@handler("LOAD_CLASSDEREF", versions=(3.11,))
@handler("LOAD_DEREF")
def LOAD_DEREF(vm: Interpreter, inst: dis.Instruction) -> None:
    cell = vm.cell(inst.argval)
    if cell.value is None:
        raise Unsupported(f"free variable {inst.argval!r} referenced before assignment")
    vm.push(cell.value)


@handler("STORE_DEREF")
def STORE_DEREF(vm: Interpreter, inst: dis.Instruction) -> None:
    name = inst.argval
    if name in vm.cells or name in vm.code.co_freevars:
        cell = vm.cell(name)
    else:
        cell = vm.cells.setdefault(name, Cell(None))
    if cell.external and cell.root_name is not None:
        # `nonlocal` of the compiled frame: the transformed code shares its cells, replay there.
        value = vm.pop()
        cell.value = value
        vm.out.side_effects.append(CellWrite(cell.root_name, value))
        return
    if cell.external:
        raise Unsupported(
            f"assigning nonlocal {inst.argval!r}, a variable of an enclosing function outside "
            "the compiled region"
        )
    cell.value = vm.pop()


@handler("LOAD_CLOSURE", versions=(3.11, 3.12))
def LOAD_CLOSURE(vm: Interpreter, inst: dis.Instruction) -> None:
    name = inst.argval
    if name not in vm.cells:
        vm.cells[name] = vm.cell(name) if name in vm.code.co_freevars else Cell(None)
    vm.push(CellVar(vm.cells[name]))


@handler("LOAD_ATTR", versions=(3.11,))
def LOAD_ATTR(vm: Interpreter, inst: dis.Instruction) -> None:
    vm.push(attributes.getattr_var(vm, vm.pop(), inst.argval))


@handler("LOAD_ATTR", versions=(3.12,))
def LOAD_ATTR_312(vm: Interpreter, inst: dis.Instruction) -> None:
    """3.12: the low bit of the oparg asks for a method load (NULL, then the bound attribute)."""
    value = attributes.getattr_var(vm, vm.pop(), inst.argval)
    if inst.arg is not None and inst.arg & 1:
        vm.push(NULL)
    vm.push(value)


@handler("LOAD_ATTR", versions=(3.13,))
def LOAD_ATTR_313(vm: Interpreter, inst: dis.Instruction) -> None:
    """3.13: a method load pushes the bound attribute, then NULL (callable, NULL, args...)."""
    vm.push(attributes.getattr_var(vm, vm.pop(), inst.argval))
    if inst.arg is not None and inst.arg & 1:
        vm.push(NULL)


@handler("LOAD_METHOD", versions=(3.11,))
def LOAD_METHOD(vm: Interpreter, inst: dis.Instruction) -> None:
    obj = vm.pop()
    vm.push(NULL)
    vm.push(attributes.getattr_var(vm, obj, inst.argval))


@handler("STORE_ATTR")
def STORE_ATTR(vm: Interpreter, inst: dis.Instruction) -> None:
    obj = vm.pop()
    value = vm.pop()
    attr_stores.setattr_var(vm, obj, inst.argval, value)


@handler("DELETE_ATTR")
def DELETE_ATTR(vm: Interpreter, inst: dis.Instruction) -> None:
    attr_stores.delattr_var(vm, vm.pop(), inst.argval)


@handler("POP_TOP")
def POP_TOP(vm: Interpreter, inst: dis.Instruction) -> None:
    vm.pop()


@handler("PUSH_NULL")
def PUSH_NULL(vm: Interpreter, inst: dis.Instruction) -> None:
    vm.push(NULL)


@handler("COPY")
def COPY(vm: Interpreter, inst: dis.Instruction) -> None:
    assert inst.arg is not None
    vm.push(vm.peek(inst.arg))


@handler("SWAP")
def SWAP(vm: Interpreter, inst: dis.Instruction) -> None:
    assert inst.arg is not None
    i = inst.arg
    vm.stack[-1], vm.stack[-i] = vm.stack[-i], vm.stack[-1]


@handler("LOAD_SUPER_ATTR", versions=(3.12, 3.13))
def LOAD_SUPER_ATTR(vm: Interpreter, inst: dis.Instruction) -> None:
    """``super().name``: pops super, the class and self; bit 0 asks for a method load.

    The NULL of a method load goes below the attribute on 3.12 and above it on 3.13.
    """
    self_var = vm.pop()
    cls_var = vm.pop()
    vm.pop()  # the global `super` itself
    sup = SuperVar(ops.const_value(vm.out, cls_var), self_var)
    value = attributes.getattr_var(vm, sup, inst.argval)
    method = inst.arg is not None and bool(inst.arg & 1)
    if method and RUNNING < (3, 13):
        vm.push(NULL)
    vm.push(value)
    if method and RUNNING >= (3, 13):
        vm.push(NULL)


@handler("IMPORT_NAME")
def IMPORT_NAME(vm: Interpreter, inst: dis.Instruction) -> None:
    """``import m`` inside the function: only modules already imported (no import side effects)."""
    fromlist = ops.const_value(vm.out, vm.pop())
    level = ops.const_value(vm.out, vm.pop())
    name = inst.argval
    if level:
        # ``from ..m import x``: resolved against the function's package as Python does
        # (``__package__``, else its spec's parent); it always has a fromlist, so it gives
        # the module itself.
        package = vm.f_globals.get("__package__") or getattr(
            vm.f_globals.get("__spec__"), "parent", None
        )
        try:
            name = importlib.util.resolve_name("." * level + name, package)
        except (ImportError, ValueError) as exc:
            raise Unsupported(f"relative import of {inst.argval!r}: {exc}") from exc
    module = sys.modules.get(name)
    if module is None:
        raise Unsupported(f"importing {name!r} (not imported yet) inside a compiled function")
    # as __import__: the top package without a fromlist (`import a.b` binds `a`, and
    # `import a.b as c` reads `b` from it with IMPORT_FROM), the module itself with one
    top = name if fromlist else name.partition(".")[0]
    vm.push(ObjectVar(sys.modules[top]))


@handler("IMPORT_FROM")
def IMPORT_FROM(vm: Interpreter, inst: dis.Instruction) -> None:
    vm.push(attributes.getattr_var(vm, vm.peek(), inst.argval))
