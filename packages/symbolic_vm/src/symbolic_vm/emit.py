"""The transformed code's statements, built as syntax trees and emitted as instructions.

codegen.Rebuilder builds the transformed code as a few statements, each a stdlib ``ast`` node
made with the constructors below (``name``, ``attr``, ``item``, ``call``, ``assign``, ...): no
text is written or parsed. :func:`emit_body` turns them into instructions with
symbolic_vm.bytecode.codegen, the same emitter the residual code and resume functions use, with
names resolved as CPython resolves them in the original function (its cell and free variables
as derefs, parameters and temporaries as fast locals, anything else as a global);
:func:`printout` is their readable text for logs and dumps (``ast.unparse``). Calls and
displays take ``*x`` and ``**kw`` in any position (CALL_FUNCTION_EX, LIST_EXTEND, DICT_MERGE...,
as CPython 3.11-3.13 emit them). Anything outside the small subset the constructors make is an
AssertionError. Imports no torch.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence

import attrs

from symbolic_vm.bytecode import PY_VERSION, Instr, Label, Position, codegen
from symbolic_vm.bytecode.codegen import with_position

__all__ = [
    "assign",
    "attr",
    "build",
    "call",
    "const",
    "dict_display",
    "emit_body",
    "expr_statement",
    "item",
    "name",
    "nonlocal_",
    "printout",
    "returns",
    "starred",
    "whole_slice",
]

Items = list[Instr | Label]


# --- constructors: what the Rebuilder builds --------------------------------------------------


def name(identifier: str) -> ast.Name:
    """A variable, resolved by :func:`emit_body` (deref, fast local or global)."""
    return ast.Name(identifier, ast.Load())


def const(value: object) -> ast.Constant:
    """A constant with a faithful literal (None, bool, int, str, bytes, finite float)."""
    return ast.Constant(value)  # type: ignore[arg-type]  # any constant load_const takes


def attr(base: ast.expr, member: str) -> ast.Attribute:
    """``base.member``."""
    return ast.Attribute(base, member, ast.Load())


def item(base: ast.expr, index: ast.expr) -> ast.Subscript:
    """``base[index]``."""
    return ast.Subscript(base, index, ast.Load())


def whole_slice() -> ast.Slice:
    """``:``, the index of a whole-sequence slice (``x[:] = ...``)."""
    return ast.Slice()


def call(
    func: ast.expr, args: Sequence[ast.expr] = (), kwargs: Mapping[str, ast.expr] | None = None
) -> ast.Call:
    """``func(*args, **kwargs)``; an argument may be :func:`starred`."""
    keywords = [ast.keyword(k, v) for k, v in (kwargs or {}).items()]
    return ast.Call(func, list(args), keywords)


def starred(value: ast.expr) -> ast.Starred:
    """``*value`` as a call argument."""
    return ast.Starred(value, ast.Load())


def build(kind: str, items: Sequence[ast.expr]) -> ast.expr:
    """A ``"tuple"``, ``"list"`` or ``"set"`` display of ``items``."""
    if kind == "tuple":
        return ast.Tuple(list(items), ast.Load())
    if kind == "list":
        return ast.List(list(items), ast.Load())
    if kind == "set":
        return ast.Set(list(items))
    raise AssertionError(f"no {kind} display in the transformed code")


def dict_display(pairs: Sequence[tuple[ast.expr, ast.expr]]) -> ast.Dict:
    """A dict display ``{k: v, ...}``."""
    return ast.Dict([k for k, _ in pairs], [v for _, v in pairs])


def assign(target: ast.expr, value: ast.expr) -> ast.Assign:
    """``target = value``; ``target`` is a name, an attribute or an item."""
    if isinstance(target, ast.Name | ast.Attribute | ast.Subscript):
        target = _as_store(target)
    # ast.unparse reads an assignment's lineno (for type comments); positions come from
    # emit_body's numbering, not from here.
    return ast.Assign([target], value, lineno=0)


def expr_statement(value: ast.expr) -> ast.Expr:
    """``value`` evaluated for its effect."""
    return ast.Expr(value)


def returns(value: ast.expr) -> ast.Return:
    """``return value``."""
    return ast.Return(value)


def nonlocal_(identifier: str) -> ast.Nonlocal:
    """``nonlocal identifier``: stores to it go to the frame's cell."""
    return ast.Nonlocal([identifier])


def printout(statement: ast.stmt | ast.expr) -> str:
    """The readable Python text of a statement or expression (logs and dumps only)."""
    return ast.unparse(statement)


def _as_store(target: ast.Name | ast.Attribute | ast.Subscript) -> ast.expr:
    if isinstance(target, ast.Name):
        return ast.Name(target.id, ast.Store())
    if isinstance(target, ast.Attribute):
        return ast.Attribute(target.value, target.attr, ast.Store())
    return ast.Subscript(target.value, target.slice, ast.Store())


# --- the emitter ------------------------------------------------------------------------------

_LIST_TO_TUPLE = 6  # CALL_INTRINSIC_1's operand for list -> tuple (3.12, 3.13)


class _Emitter:
    def __init__(self, params: Sequence[str], derefs: Sequence[str], stored: set[str]) -> None:
        self.derefs = set(derefs)
        self.fast = set(params) | stored

    def load(self, name: str) -> Instr:
        if name in self.derefs:
            return codegen.load_deref(name)
        if name in self.fast:
            return codegen.load_fast(name)
        return codegen.load_global(name)

    def store(self, name: str) -> Instr:
        if name in self.derefs:
            return codegen.store_deref(name)
        return codegen.store_fast(name)

    # --- statements ----------------------------------------------------------------------

    def statement(self, node: ast.stmt) -> Items:
        if isinstance(node, ast.Nonlocal):
            self.derefs.update(node.names)
            return []
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            return [*self.expr(node.value), *self.store_target(node.targets[0])]
        if isinstance(node, ast.Expr):
            return [*self.expr(node.value), Instr("POP_TOP")]
        if isinstance(node, ast.Return) and node.value is not None:
            return [*self.expr(node.value), codegen.return_value()]
        raise AssertionError(f"not a statement the transformed code has: {ast.dump(node)}")

    def store_target(self, target: ast.expr) -> Items:
        if isinstance(target, ast.Name):
            return [self.store(target.id)]
        if isinstance(target, ast.Subscript):
            return [*self.expr(target.value), *self.index(target.slice), Instr("STORE_SUBSCR")]
        if isinstance(target, ast.Attribute):
            return [*self.expr(target.value), codegen.store_attr(target.attr)]
        raise AssertionError(f"not a target the transformed code has: {ast.dump(target)}")

    # --- expressions ---------------------------------------------------------------------

    def expr(self, node: ast.expr) -> Items:
        if isinstance(node, ast.Name):
            return [self.load(node.id)]
        if isinstance(node, ast.Constant):
            return [codegen.load_const(node.value)]
        if (
            isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant)
            and isinstance(node.operand.value, int | float)
        ):
            return [codegen.load_const(-node.operand.value)]  # a negative literal: repr(-1)
        if isinstance(node, ast.Attribute):
            return [*self.expr(node.value), codegen.load_attr(node.attr)]
        if isinstance(node, ast.Subscript):
            return [*self.expr(node.value), *self.index(node.slice), Instr("BINARY_SUBSCR")]
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            kind = {ast.Tuple: "tuple", ast.List: "list", ast.Set: "set"}[type(node)]
            if any(isinstance(item, ast.Starred) for item in node.elts):
                return self.unpacking_display(kind, node.elts)
            items = [i for item in node.elts for i in self.expr(item)]
            return [*items, codegen.build(kind, len(node.elts))]
        if isinstance(node, ast.Dict):
            return self.merged_dict(list(zip(node.keys, node.values, strict=True)), "DICT_UPDATE")
        raise AssertionError(f"not an expression the transformed code has: {ast.dump(node)}")

    def index(self, node: ast.expr) -> Items:
        if isinstance(node, ast.Slice):
            if node.lower or node.upper or node.step:
                raise AssertionError("only a whole-sequence slice in the transformed code")
            none = codegen.load_const(None)
            return [none, none, Instr("BUILD_SLICE", 2)]
        return self.expr(node)

    def call(self, node: ast.Call) -> Items:
        starred = any(isinstance(a, ast.Starred) for a in node.args)
        if starred or any(k.arg is None for k in node.keywords):
            # f(*a, k=v, **kw): one argument tuple and one keyword dict, as CPython emits it
            packed = (self.spread(node.args) if starred
                      else [*(i for a in node.args for i in self.expr(a)),
                            codegen.build("tuple", len(node.args))])
            if not node.keywords:
                return [*self.callee(node.func), *packed, Instr("CALL_FUNCTION_EX", 0)]
            pairs = [(None if k.arg is None else ast.Constant(k.arg), k.value)
                     for k in node.keywords]
            return [*self.callee(node.func), *packed, *self.merged_dict(pairs, "DICT_MERGE"),
                    Instr("CALL_FUNCTION_EX", 1)]
        kwargs = {k.arg: self.expr(k.value) for k in node.keywords if k.arg is not None}
        args = [self.expr(a) for a in node.args]
        func = node.func
        if isinstance(func, ast.Attribute):  # obj.name(...): CPython's method-call form
            return codegen.call_method(self.expr(func.value), func.attr, args, kwargs)
        return codegen.call_function(self.expr(func), args, kwargs)

    def callee(self, func: ast.expr) -> Items:
        """The callable and the NULL a call expects (a global's NULL bit, as CPython emits)."""
        loads = self.expr(func)
        if len(loads) == 1 and isinstance(loads[0], Instr) and loads[0].opname == "LOAD_GLOBAL":
            return [attrs.evolve(loads[0], flags=1)]
        if PY_VERSION >= (3, 13):
            return [*loads, Instr("PUSH_NULL")]
        return [Instr("PUSH_NULL"), *loads]

    def spread(self, args: Sequence[ast.expr]) -> Items:
        """A tuple of ``args`` where starred ones are unpacked in place (``f(x, *p)``): the
        leading plain ones in one BUILD_LIST, as CPython emits it."""
        lead = 0
        out: Items = []
        while lead < len(args) and not isinstance(args[lead], ast.Starred):
            out.extend(self.expr(args[lead]))
            lead += 1
        out.append(codegen.build("list", lead))
        for arg in args[lead:]:
            if isinstance(arg, ast.Starred):
                out.extend([*self.expr(arg.value), Instr("LIST_EXTEND", 1)])
            else:
                out.extend([*self.expr(arg), Instr("LIST_APPEND", 1)])
        out.append(_list_to_tuple())
        return out

    def unpacking_display(self, kind: str, elts: Sequence[ast.expr]) -> Items:
        """``(*a, x)``, ``[x, *a]``, ``{*a, x}``: the leading plain items built at once, then
        each starred one extended in and each later plain one added (a tuple is built as a
        list, then converted), as CPython emits it."""
        if kind == "tuple":
            return [*self.spread(elts)]
        extend, add = ("LIST_EXTEND", "LIST_APPEND") if kind == "list" else (
            "SET_UPDATE", "SET_ADD")
        lead = 0
        out: Items = []
        while not isinstance(elts[lead], ast.Starred):
            out.extend(self.expr(elts[lead]))
            lead += 1
        out.append(codegen.build(kind, lead))
        for item in elts[lead:]:
            if isinstance(item, ast.Starred):
                out.extend([*self.expr(item.value), Instr(extend, 1)])
            else:
                out.extend([*self.expr(item), Instr(add, 1)])
        return out

    def merged_dict(
        self, pairs: Sequence[tuple[ast.expr | None, ast.expr]], merge: str
    ) -> Items:
        """A dict of ``pairs`` in order, a None key meaning ``**value``: runs of plain pairs
        built with BUILD_MAP and merged in with ``merge`` (DICT_UPDATE for a display,
        DICT_MERGE for a call's keywords: it raises on a repeated keyword), as CPython emits
        it."""
        out: Items = []
        run: Items = []  # the plain pairs since the last ** (not built yet)
        count = 0
        made = False  # the dict is on the stack

        def flush() -> None:
            if not made or count:
                out.extend([*run, codegen.build("dict", count)])
                out.extend([Instr(merge, 1)] if made else [])

        for key, value in pairs:
            if key is not None:
                run.extend([*self.expr(key), *self.expr(value)])
                count += 1
                continue
            flush()
            run, count, made = [], 0, True
            out.extend([*self.expr(value), Instr(merge, 1)])
        flush()
        return out


def _list_to_tuple() -> Instr:
    if PY_VERSION >= (3, 12):
        return Instr("CALL_INTRINSIC_1", _LIST_TO_TUPLE)
    return Instr("LIST_TO_TUPLE")


def emit_body(
    statements: Sequence[ast.stmt], *, params: Sequence[str], derefs: Sequence[str],
    first_line: int = 1,
) -> Items:
    """The instructions of ``statements`` in a function whose parameters are ``params`` and
    whose cell and free variables are ``derefs``; every other name assigned in them is a fast
    local, every name read and never assigned a global. Statement ``k`` gets the source line
    ``first_line + k`` (as the printout numbers them)."""
    stored = {
        target.id
        for node in statements if isinstance(node, ast.Assign)
        for target in node.targets if isinstance(target, ast.Name)
    }
    nonlocal_names = {name for node in statements if isinstance(node, ast.Nonlocal)
                      for name in node.names}
    emitter = _Emitter(params, [*derefs, *nonlocal_names], stored - nonlocal_names)
    out: Items = []
    for k, node in enumerate(statements):
        line = first_line + k
        out.extend(with_position(emitter.statement(node), Position(line, line)))
    return out
