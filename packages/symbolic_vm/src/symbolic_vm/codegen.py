"""The transformed code: call the compiled graph, replay side effects, rebuild the return value.

It is generated as Python source with the original's argument layout and free variables, then
compiled; the graph inputs are read from ``locals()``/``globals()`` with the guards' source
expressions (``L['self'].fc.weight``), so the code needs nothing the frame does not hold.
"""

from __future__ import annotations

import inspect
import math
import re
import types
from collections.abc import Callable
from typing import Any

import torch

from symbolic_vm.errors import Unsupported
from symbolic_vm.output import AttrWrite, CellWrite, ContainerWrite, GlobalWrite, Output
from symbolic_vm.values import (
    BoundMethodVar,
    ConstVar,
    DictVar,
    FunctionVar,
    IteratorVar,
    ListVar,
    MethodVar,
    ModuleVar,
    NewObjectVar,
    ObjectVar,
    SymVar,
    TensorVar,
    TupleVar,
    Var,
)

_L = "__strata_L"
_G = "__strata_G"
_OUT = "__strata_out"
_SOURCE_ROOT = re.compile(r"(?<![\w.'\"])([LG])\[")


def source_expr(source: Any) -> str:
    """A source's guard expression, rewritten over the transformed code's own locals/globals."""
    return _SOURCE_ROOT.sub(lambda m: ("__strata_L[" if m.group(1) == "L" else "__strata_G["),
                            source.name())


def make_object(cls: type, attributes: dict[str, object]) -> object:
    """Rebuild an object created while tracing (its ``__init__`` already ran symbolically)."""
    obj: Any = object.__new__(cls)
    obj.__dict__.update(attributes)
    return obj


class Rebuilder:
    """Turns tracked values into expressions, collecting the graph outputs they need."""

    def __init__(self, out: Output) -> None:
        self.out = out
        self.outputs: list[Any] = []  # fx nodes, in output order
        self._index: dict[int, int] = {}
        # Statements run after the graph, before any write: temporaries for values, and one
        # binding per object made while tracing so each is built once (identity is kept).
        self.lines: list[str] = []
        self._made: dict[int, str] = {}

    def bind(self, expr: str) -> str:
        """A temporary holding ``expr``, evaluated now (before any write)."""
        name = f"__strata_v{len(self.lines)}"
        self.lines.append(f"{name} = {expr}")
        return name

    def _once(self, box: object, build: Callable[[], str]) -> str:
        known = self._made.get(id(box))
        if known is None:
            known = self.bind(build())
            self._made[id(box)] = known
        return known

    def expr(self, var: Var) -> str:
        if isinstance(var, (TensorVar, SymVar)):
            if var.node.op == "placeholder" and var.source is not None:
                return source_expr(var.source)
            index = self._index.get(id(var.node))
            if index is None:
                index = len(self.outputs)
                self.outputs.append(var.node)
                self._index[id(var.node)] = index
            return f"{_OUT}[{index}]"
        if var.source is not None and not isinstance(var, (TupleVar, NewObjectVar)):
            return source_expr(var.source)
        if isinstance(var, ConstVar):
            return self.constant(var.value)
        if isinstance(var, TupleVar):
            inner = "".join(f"{self.expr(v)}, " for v in var.items)
            if var.is_size:
                return f"{self.out.install(torch.Size, 'Size')}(({inner}))"
            if var.named_type is not None:
                cls = self.out.install(var.named_type, "cls")
                if hasattr(var.named_type, "_make"):  # collections.namedtuple / typing.NamedTuple
                    return f"{cls}._make(({inner}))"
                return f"{cls}(({inner}))"  # torch.return_types take one sequence
            return f"({inner})"
        if isinstance(var, ListVar):
            box = var.box
            return self._once(box, lambda: "[" + ", ".join(self.expr(v) for v in box.items) + "]")
        if isinstance(var, DictVar):
            dbox = var.box
            return self._once(dbox, lambda: "{" + ", ".join(
                f"{self.constant(k)}: {self.expr(v)}" for k, v in dbox.items.items()
            ) + "}")
        if isinstance(var, ObjectVar):
            if type(var.value) is set:  # a fresh set per call, never a shared one
                return f"set({self.out.install(frozenset(var.value))})"
            if isinstance(var.value, (list, dict, bytearray)):
                raise Unsupported(f"returning a {type(var.value).__name__} the VM cannot rebuild")
            return self.out.install(var.value)
        if isinstance(var, ModuleVar):
            return self.out.install(var.module)
        if isinstance(var, FunctionVar):
            return self.out.install(var.fn)
        if isinstance(var, NewObjectVar):
            helper = self.out.install(make_object, "make_object")
            cls = self.out.install(var.box.cls, "cls")
            obox = var.box
            return self._once(obox, lambda: f"{helper}({cls}, {{" + ", ".join(
                f"{k!r}: {self.expr(v)}" for k, v in obox.attrs.items()
            ) + "})")
        if isinstance(var, MethodVar) and isinstance(
            var.self_var, (TensorVar, ListVar, DictVar, ConstVar)
        ):
            return f"{self.expr(var.self_var)}.{var.name}"
        if isinstance(var, IteratorVar):
            ibox = var.box  # one iterator object however often it is referenced
            return self._once(ibox, lambda: "iter([" + ", ".join(
                self.expr(v) for v in ibox.items[ibox.index :]
            ) + "])")
        if isinstance(var, BoundMethodVar):
            return f"{self.expr(var.func)}.__get__({self.expr(var.self_var)})"
        raise Unsupported(
            f"returning or storing {type(var).__name__.removesuffix('Var').lower()} "
            "out of a compiled function"
        )

    def constant(self, value: object) -> str:
        if value is None or isinstance(value, (bool, int, str, bytes)):
            return repr(value)
        if isinstance(value, float) and math.isfinite(value):
            return repr(value)
        return self.out.install(value)


def signature_text(code: types.CodeType) -> str:
    """The parameter list of ``code`` (no defaults: the function object supplies them)."""
    names = code.co_varnames
    npos, nposonly, nkw = code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount
    parts = list(names[:nposonly])
    if nposonly:
        parts.append("/")
    parts.extend(names[nposonly:npos])
    index = npos + nkw
    if code.co_flags & inspect.CO_VARARGS:
        parts.append("*" + names[index])
        index += 1
    elif nkw:
        parts.append("*")
    parts.extend(names[npos : npos + nkw])
    if code.co_flags & inspect.CO_VARKEYWORDS:
        parts.append("**" + names[index])
    return ", ".join(parts)


def effect_lines(rebuilder: Rebuilder, out: Output) -> list[str]:
    """The writes replaying the trace's side effects, in program order.

    Every value they use is read into a temporary first (``rebuilder.lines``), so a write never
    changes what a later value expression reads (``d.clear()`` then ``d['k']``).
    """
    writes: list[str] = []
    temp = rebuilder.bind

    for effect in out.side_effects:
        if isinstance(effect, AttrWrite):
            target = temp(rebuilder.expr(effect.target))
            value = temp(rebuilder.expr(effect.value))
            writes.append(f"setattr({target}, {effect.name!r}, {value})")
        elif isinstance(effect, CellWrite):
            value = temp(rebuilder.expr(effect.value))
            writes.append(f"{effect.name} = {value}")
        elif isinstance(effect, GlobalWrite):
            value = temp(rebuilder.expr(effect.value))
            writes.append(f"{_G}[{effect.name!r}] = {value}")
        elif isinstance(effect, ContainerWrite):
            container = effect.target
            assert container.source is not None
            target = temp(source_expr(container.source))
            if isinstance(container, ListVar):
                items = temp("[" + ", ".join(rebuilder.expr(v) for v in container.box.items) + "]")
                writes.append(f"{target}[:] = {items}")
            elif isinstance(container, DictVar):
                pairs = ", ".join(
                    f"{rebuilder.constant(k)}: {rebuilder.expr(v)}"
                    for k, v in container.box.items.items()
                )
                contents = temp("{" + pairs + "}")
                writes.append(f"{target}.clear()")
                writes.append(f"{target}.update({contents})")
    return writes


def build_code(  # noqa: PLR0917 - the parts of one generated function
    original: types.CodeType,
    graph_call: str | None,
    graph_args: list[str],
    reads: list[str],
    writes: list[str],
    return_expr: str,
    nonlocals: list[str] | None = None,
) -> types.CodeType:
    """Compile the transformed function and return its code object."""
    body = [f"nonlocal {name}" for name in nonlocals or []]
    body += [
        "if False:",
        f"    ({', '.join([*original.co_freevars, ''])})",
        f"    (lambda: ({', '.join([*original.co_cellvars, ''])}))",
        f"{_L} = locals()",
        f"{_G} = globals()",
    ]
    if graph_call is not None:
        body.append(f"{_OUT} = {graph_call}({', '.join(graph_args)})")
    body.extend(reads)
    body.append(f"__strata_result = {return_expr}")
    body.extend(writes)
    body.append("return __strata_result")
    free_init = "".join(f"    {name} = None\n" for name in original.co_freevars)
    source = (
        "def __strata_outer():\n"
        f"{free_init}"
        f"    def __strata_transformed({signature_text(original)}):\n"
        + "".join(f"        {line}\n" for line in body)
        + "    return __strata_transformed\n"
    )
    module_code = compile(source, f"<strata transformed {original.co_name}>", "exec")
    outer = next(c for c in module_code.co_consts if isinstance(c, types.CodeType))
    inner = next(c for c in outer.co_consts if isinstance(c, types.CodeType))
    code = inner.replace(co_name=original.co_name, co_qualname=original.co_qualname)
    _check_layout(original, code)
    return code


def _check_layout(original: types.CodeType, code: types.CodeType) -> None:
    nargs = _total_args(original)
    if (
        code.co_varnames[:nargs] != original.co_varnames[:nargs]
        or code.co_freevars != original.co_freevars
        or code.co_argcount != original.co_argcount
        or code.co_kwonlyargcount != original.co_kwonlyargcount
        or code.co_posonlyargcount != original.co_posonlyargcount
        or (code.co_flags ^ original.co_flags) & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
    ):
        raise AssertionError("transformed code lost the original's argument layout")


def _total_args(code: types.CodeType) -> int:
    n = code.co_argcount + code.co_kwonlyargcount
    n += bool(code.co_flags & inspect.CO_VARARGS) + bool(code.co_flags & inspect.CO_VARKEYWORDS)
    return n


__all__ = ["Rebuilder", "build_code", "make_object", "source_expr"]
