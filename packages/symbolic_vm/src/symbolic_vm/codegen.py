"""The transformed code: call the compiled graph, replay side effects, rebuild the return value.

It is built as a few statements, syntax trees made with symbolic_vm.emit's constructors (their
printout is what logs and dumps show), and emitted as instructions (symbolic_vm.emit,
symbolic_vm.bytecode) with the original's argument layout, free and cell variables; it runs with
the frame's globals. Sources are read by name: an argument or free variable ``L['x']`` is the
plain name ``x`` (LOAD_FAST / LOAD_DEREF), a global ``G['w']`` is ``w`` (LOAD_GLOBAL), attribute
and item steps follow (``self._modules['0']._parameters['weight']``). A global shadowed by one of
the function's names (or not an identifier) is read through ``__strata_<n>_globals_fn()[name]``
(``builtins.globals`` under a name the frame cannot shadow); a prefix shared by several reads
(``self._modules['0']._parameters``) is read once into a temporary at the top of the function.

Parameters of a pinned module (the one compile() was given) are not read through their paths:
one ``guards.params_reader`` per root module returns them all (``__strata_p<k> = reader()``, then
``__strata_p<k>[j]``; a whole reader passed in order becomes ``*__strata_p<k>`` in the graph
call; its own name stem, so no other temporary's items are ever mistaken for a reader's).
That is the object the path holds whenever the entry's guard passed: Output.guard_set guards
each one's identity at its path (MODULE_PARAMS, else an ID_MATCH).
"""

from __future__ import annotations

import ast
import builtins
import collections
import copy
import functools
import inspect
import itertools
import keyword
import logging
import math
import re
import types
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch

from symbolic_vm import emit
from symbolic_vm.bytecode import Instr, Label, Signature, assemble
from symbolic_vm.bytecode.codegen import prologue
from symbolic_vm.constant_values import MadeObjectId
from symbolic_vm.errors import Unsupported
from symbolic_vm.guard_api import (
    AttrSource,
    DictCopySource,
    GlobalSource,
    InstanceAttrSource,
    ItemSource,
    LocalSource,
    MethodCallSource,
    SizeSource,
    Source,
    StrideSource,
    TypeSource,
    params_reader,
)
from symbolic_vm.made_classes import made_classes
from symbolic_vm.output import Output
from symbolic_vm.side_effects import (
    AttrDelete,
    AttrWrite,
    CellWrite,
    ContainerWrite,
    DeferredCall,
    DictSubclassWrite,
    GlobalWrite,
    HookRegistration,
    advanced_iterator,
    make_based_object,
    replace_dict_items,
)
from symbolic_vm.values import (
    BoundMethodVar,
    ConstVar,
    DictBox,
    DictVar,
    FunctionVar,
    IteratorVar,
    ListVar,
    MethodVar,
    ModuleVar,
    NestedFunctionVar,
    NewObjectVar,
    ObjectVar,
    SetVar,
    SliceVar,
    SymVar,
    TensorVar,
    TupleVar,
    Var,
)

log = logging.getLogger("strata.symbolic_vm")

_OUT = "__strata_out"
# Statements binding a shared source prefix: reads of the frame's state at entry, hoisted by
# build_code above the graph call (the graph never changes Python objects).
_PREFIX = "__strata_s"
# A parameter reader's tuple (Rebuilder._reader_item), also bound at entry.
_READER = "__strata_p"
_ENTRY_READ = re.compile(rf"(?:{_PREFIX}|{_READER})\d+")
_READER_TUPLE = re.compile(rf"{_READER}\d+")
# The transformed function's own temporaries (a global by such a name would be shadowed);
# helper globals are named __strata_<capture>_<stem>_<k> and never match.
_TEMPORARY = re.compile(r"__strata_(?:out|result|[svp]\d+|transformed|outer)")


def frame_names(code: types.CodeType) -> frozenset[str]:
    """The names that are local to the transformed code of ``code`` (a global by one of these
    names cannot be read as a plain name there)."""
    return frozenset(
        (*code.co_varnames[: _total_args(code)], *code.co_freevars, *code.co_cellvars)
    )


def make_object(
    cls: type, attributes: dict[str, object], items: dict[object, object] | None = None
) -> object:
    """Rebuild an object created while tracing (its ``__init__`` already ran symbolically)."""
    if issubclass(cls, torch.nn.Module):
        # A module made inside: nn.Module's own state first, then attributes through its
        # __setattr__ (submodules register as eager's __init__ registered them).
        module: Any = cls.__new__(cls)
        torch.nn.Module.__init__(module)
        for name, value in attributes.items():
            setattr(module, name, value)
        return module
    if cls is collections.deque:  # stdlib/deque_.py keeps its items under this name
        items_of: Any = attributes["__strata_deque_items__"]
        bound: Any = attributes["maxlen"]
        return collections.deque(items_of, bound)
    if cls is functools._lru_cache_wrapper:  # stdlib/functools_.py: a cache made here
        state = dict(attributes)
        wrapper_type: Any = functools._lru_cache_wrapper
        made_cache: Any = wrapper_type(
            state.pop("__strata_lru_function__"), state.pop("__strata_lru_maxsize__"),
            state.pop("__strata_lru_typed__"), functools._CacheInfo,  # type: ignore[attr-defined]
        )
        made_cache.__dict__.update(state)
        return made_cache
    if items is not None:
        # A dict/OrderedDict subclass: made and filled through its C base, so the class's
        # own __setitem__/__init__ (already traced) do not run again.
        base: Any = next(k for k in cls.__mro__ if not k.__flags__ & (1 << 9))
        made: Any = base.__new__(cls)
        for key, value in items.items():
            base.__setitem__(made, key, value)
        state = dict(attributes)
        if isinstance(made, collections.defaultdict):  # a C slot, not in __dict__
            made.default_factory = state.pop("default_factory", None)  # type: ignore[assignment]
        if state:
            made.__dict__.update(state)
        return made
    obj: Any = object.__new__(cls)
    if cls.__dictoffset__ == 0 or any("__slots__" in k.__dict__ for k in cls.__mro__):
        for name, value in attributes.items():  # __slots__ members through their descriptors
            object.__setattr__(obj, name, value)
        return obj
    obj.__dict__.update(attributes)
    return obj


def make_function(
    code: types.CodeType,
    f_globals: dict[str, Any],
    *,
    defaults: tuple[object, ...],
    kwdefaults: dict[str, object],
    cells: tuple[types.CellType, ...],
    annotations: tuple[Any, ...] | None,
    specials: dict[str, object],
    attributes: dict[str, object],
) -> types.FunctionType:
    """Rebuild a function made while tracing (MAKE_FUNCTION) that leaves the frame: what
    MAKE_FUNCTION made from the same code, then what the trace stored on it."""
    fn = types.FunctionType(code, f_globals, code.co_name, defaults or None, cells or None)
    if kwdefaults:
        fn.__kwdefaults__ = kwdefaults
    if annotations is not None:  # MAKE_FUNCTION's flat (name, value, ...) tuple
        fn.__annotations__ = dict(zip(annotations[::2], annotations[1::2], strict=True))
    for name, value in specials.items():
        setattr(fn, name, value)
    fn.__dict__.update(attributes)
    return fn


class Rebuilder:
    """Turns tracked values into expressions (syntax trees, symbolic_vm.emit), collecting the
    graph outputs they need."""

    def __init__(self, out: Output) -> None:
        self.out = out
        self.outputs: list[Any] = []  # fx nodes, in output order
        self._index: dict[int, int] = {}
        # Statements run after the graph, before any write: temporaries for values, and one
        # binding per object made while tracing so each is built once (identity is kept).
        self.lines: list[ast.stmt] = []
        self._made: dict[int, ast.expr] = {}
        self._filled: set[int] = set()  # cells of rebuilt functions whose contents are set
        self._prefixes: dict[Source, ast.expr] = {}
        self._readers: dict[Source, str] = {}  # root module source -> its reader's tuple
        self._prefix_numbers = itertools.count()

    def source(self, source: Source) -> ast.expr:
        """An expression reading ``source`` in the transformed code, by name (see module doc).

        Every proper prefix of the source below its root is bound once to a temporary
        (``__strata_s<k>``), so reads sharing a module path walk it once. A module parameter
        the graph uses is an item of its root's parameter reader instead.
        """
        served = self._reader_item(source)
        if served is not None:
            return served
        chain = source.chain()
        start = 0
        expr: ast.expr | None = None
        for k in range(len(chain) - 1, 0, -1):
            known = self._prefixes.get(chain[k])
            if known is not None:
                start, expr = k, known
                break
        if expr is None:
            expr = self._root(chain[0])
        for k in range(start + 1, len(chain)):
            expr = self._step(chain[k], expr)
            if k < len(chain) - 1:
                name = emit.name(f"{_PREFIX}{next(self._prefix_numbers)}")
                self.lines.append(emit.assign(name, expr))
                self._prefixes[chain[k]] = name
                expr = name
        return expr

    def _step(self, source: Source, base: ast.expr) -> ast.expr:
        """``source`` read from its base's expression ``base``, built from the source's fields
        (never from its text). Builtins are reached through installed globals: a frame name
        ``getattr`` or ``type`` cannot shadow them."""
        if isinstance(source, AttrSource):
            if _plain_member(source.member):
                return emit.attr(base, source.member)
            return self._call(builtins.getattr, "getattr", [base, emit.const(source.member)])
        if isinstance(source, ItemSource):
            return emit.item(base, self.constant(source.index))
        if isinstance(source, TypeSource):
            return self._call(type, "type", [base])
        if isinstance(source, (SizeSource, StrideSource)):
            return emit.call(emit.attr(base, source.query), [emit.const(source.dim)])
        if isinstance(source, MethodCallSource):
            method = (
                emit.attr(base, source.method)
                if _plain_member(source.method)
                else self._call(builtins.getattr, "getattr", [base, emit.const(source.method)])
            )
            return emit.call(
                method,
                [self.constant(a) for a in source.args],
                {k: self.constant(v) for k, v in source.kwargs},
            )
        if isinstance(source, DictCopySource):
            return self._call(dict, "dict", [self._call(dict.items, "dict_items", [base])])
        if isinstance(source, InstanceAttrSource):
            reader = object.__getattribute__
            return self._call(reader, "getattribute", [base, emit.const(source.member)])
        if source.base is None:
            raise Unsupported(f"reading {source.describe()} in the transformed code")
        # Any other derived kind (a class-dict read, a stdlib container's snapshot, ...): the
        # source's own read of its base's value, installed as a helper.
        return self._call(functools.partial(_read_step, source), "read", [base])

    def _reader_item(self, source: Source) -> ast.expr | None:
        """``__strata_p<k>[j]`` when ``source`` is a parameter Output.reader_group serves,
        binding the root's reader call once (a prefix statement, read at entry)."""
        try:
            root, members = self.out.reader_group(source)
        except KeyError:
            return None
        name = self._readers.get(root)
        if name is None:
            reader = params_reader([tensor for _, tensor in members])
            name = f"{_READER}{len(self._readers)}"
            call = emit.call(emit.name(self.out.install(reader, "params")))
            self.lines.append(emit.assign(emit.name(name), call))
            self._readers[root] = name
        index = next(j for j, (member, _) in enumerate(members) if member == source)
        return emit.item(emit.name(name), emit.const(index))

    def _root(self, root: Source) -> ast.expr:
        names = self.out.frame_names
        if isinstance(root, LocalSource):
            if root.local_name.isidentifier():
                return emit.name(root.local_name)
            locals_fn = self.out.install(builtins.locals, "locals_fn")
            return emit.item(emit.call(emit.name(locals_fn)), emit.const(root.local_name))
        if isinstance(root, GlobalSource):
            name = root.global_name
            if name.isidentifier() and name not in names and not _TEMPORARY.fullmatch(name):
                return emit.name(name)
            return emit.item(self.globals_dict(), emit.const(name))
        raise Unsupported(f"reading {root.name()} in the transformed code")

    def globals_dict(self) -> ast.expr:
        """An expression for the frame's globals dict that no name of the frame can shadow."""
        return emit.call(emit.name(self.out.install(builtins.globals, "globals_fn")))

    def bind(self, expr: ast.expr) -> ast.expr:
        """A temporary holding ``expr``, evaluated now (before any write)."""
        name = emit.name(f"__strata_v{len(self.lines)}")
        self.lines.append(emit.assign(name, expr))
        return name

    def made(self, box: object) -> bool:
        """Whether an expression building ``box`` (a container's or iterator's) was made."""
        return id(box) in self._made

    def _once(self, box: object, build: Callable[[], ast.expr]) -> ast.expr:
        known = self._made.get(id(box))
        if known is None:
            known = self.bind(build())
            self._made[id(box)] = known
        return known

    def _call(self, value: object, stem: str, args: Sequence[ast.expr]) -> ast.expr:
        """A call of ``value``, installed as a global named after ``stem``."""
        return emit.call(emit.name(self.out.install(value, stem)), args)

    def expr(self, var: Var) -> ast.expr:
        self._check_made_class(var)
        if isinstance(var, (TensorVar, SymVar)):
            if var.node.op == "placeholder" and var.source is not None:
                return self.source(var.source)
            index = self._index.get(id(var.node))
            if index is None:
                index = len(self.outputs)
                self.outputs.append(var.node)
                self._index[id(var.node)] = index
            return emit.item(emit.name(_OUT), emit.const(index))
        if var.source is not None and not isinstance(var, (TupleVar, NewObjectVar)):
            return self.source(var.source)
        if isinstance(var, ConstVar):
            return self.constant(var.value)
        if isinstance(var, SliceVar):  # with a traced bound: made when the code runs
            parts = [self.expr(p) for p in (var.start, var.stop, var.step)]
            return self._call(slice, "slice", parts)
        if isinstance(var, TupleVar):
            if var.source is not None:
                # Rebuilt item by item from a tuple the frame received: the code holds only
                # for a tuple of this type and length (TYPE_MATCH + LENGTH, never its values).
                self.out.depend(var)
            inner = emit.build("tuple", [self.expr(v) for v in var.items])
            if var.is_size:
                return self._call(torch.Size, "Size", [inner])
            if var.named_type is not None:
                cls = emit.name(self.out.install(var.named_type, "cls"))
                if hasattr(var.named_type, "_make"):  # collections.namedtuple / typing.NamedTuple
                    return emit.call(emit.attr(cls, "_make"), [inner])
                return emit.call(cls, [inner])  # torch.return_types take one sequence
            return inner
        if isinstance(var, (ListVar, DictVar)) and not self.made(var.box) and _holds_itself(var):
            # ``l.append(l)``: made empty first, then filled with items that name it
            made = self._once(var.box, lambda: emit.build("list", []) if isinstance(
                var, ListVar) else emit.dict_display([]))
            filled = (emit.build("list", [self.expr(v) for v in var.box.items])
                      if isinstance(var, ListVar) else self._dict(var.box))
            fill = "extend" if isinstance(var, ListVar) else "update"
            self.lines.append(emit.expr_statement(emit.call(emit.attr(made, fill), [filled])))
            return made
        if isinstance(var, ListVar):
            box = var.box
            return self._once(box, lambda: emit.build("list", [self.expr(v) for v in box.items]))
        if isinstance(var, DictVar):
            dbox = var.box
            return self._once(dbox, lambda: self._dict(dbox))
        if isinstance(var, SetVar) and var.cls is not set:
            raise Unsupported(f"returning an instance of the set subclass {var.cls.__name__}")
        if isinstance(var, SetVar):
            sbox = var.box  # one set object however often it is referenced
            # From a frozenset copy: CPython copies a set's slots, so the order is kept.
            return self._once(sbox, lambda: self._fresh_set(frozenset(sbox.items)))
        if isinstance(var, ObjectVar):
            if type(var.value) is set:  # a fresh set per call, never a shared one
                return self._fresh_set(frozenset(var.value))
            if isinstance(var.value, (list, dict, bytearray)):
                raise Unsupported(f"returning a {type(var.value).__name__} the VM cannot rebuild")
            return emit.name(self.out.install(var.value))
        if isinstance(var, ModuleVar) and var.created:
            # Made inside the function: eager returns a fresh module on every call.
            copier = emit.name(self.out.install(copy.deepcopy, "deepcopy"))
            template = emit.name(self.out.install(var.module, "module"))
            return self._once(var.module, lambda: emit.call(copier, [template]))
        if isinstance(var, ModuleVar):
            return emit.name(self.out.install(var.module))
        if isinstance(var, FunctionVar):
            return emit.name(self.out.install(var.fn))
        if isinstance(var, NewObjectVar) and var.box.base is not None:  # a tuple/set subclass
            based, base, attrs = var.box, var.box.base, var.box.attrs
            return self._once(based, lambda: self._call(make_based_object, "made", [
                emit.name(self.out.install(based.cls, "cls")), self.expr(base),
                emit.dict_display([(emit.const(k), self.expr(v)) for k, v in attrs.items()])]))
        if isinstance(var, NewObjectVar):
            helper = emit.name(self.out.install(make_object, "make_object"))
            cls = emit.name(self.out.install(var.box.cls, "cls"))
            obox = var.box
            return self._once(obox, lambda: emit.call(helper, [
                cls,
                emit.dict_display([(emit.const(k), self.expr(v)) for k, v in obox.attrs.items()]),
                *([] if obox.items is None else [self._dict(obox.items)]),
            ]))
        if isinstance(var, MethodVar) and isinstance(
            var.self_var, (TensorVar, ListVar, DictVar, ConstVar)
        ):
            return emit.attr(self.expr(var.self_var), var.name)
        if isinstance(var, IteratorVar):
            ibox = var.box  # one iterator object however often it is referenced
            if ibox.over is not None and not ibox.done:  # it reads its list as it goes
                return self._once(ibox, lambda: self._call(advanced_iterator, "advanced", [
                    self.expr(ibox.over), emit.const(ibox.index)]))  # type: ignore[arg-type]
            if not (ibox.exact or ibox.done):
                raise Unsupported("an iterator over a container leaving a compiled function")
            return self._once(ibox, lambda: self._call(iter, "iter", [
                emit.build("list", [self.expr(v) for v in ibox.items[ibox.index :]])]))
        if isinstance(var, BoundMethodVar):
            return emit.call(
                emit.attr(self.expr(var.func), "__get__"), [self.expr(var.self_var)]
            )
        if isinstance(var, NestedFunctionVar):
            return self._function(var)
        raise Unsupported(
            f"returning or storing {type(var).__name__.removesuffix('Var').lower()} "
            "out of a compiled function"
        )

    def _check_made_class(self, var: Var) -> None:
        """Raise ClassEscapes for a class made by a class statement in the trace (or its
        instance or method): eager makes a new one per call, the trace's must not leave."""
        made = made_classes(self.out)
        if not made.steps:
            return
        if isinstance(var, NewObjectVar):
            owner, what = made.owner(var.box.cls), "an instance"
        elif isinstance(var, ObjectVar):
            owner, what = made.owner(var.value), "the class or its member"
        elif isinstance(var, FunctionVar):
            owner, what = made.owner(var.fn), "a method"
        else:
            return
        if owner is not None:
            raise made.escape(owner, what)

    def _function(self, fn: NestedFunctionVar) -> ast.expr:
        """A function made while tracing that leaves the frame (returned, stored): made once,
        with fresh cells shared as the trace shared them. Each cell is made empty first and
        filled after the function exists, so a function in its own closure (recursion) works."""
        if any(cell.external for cell in fn.closure):
            # The real cell (the frame's free variable, a called function's closure) would
            # have to be the one shared: not rebuilt.
            raise Unsupported(
                "returning or storing a function made in the compiled function that closes "
                "over a variable from outside it"
            )
        cells = [
            self._once(cell, lambda: self._call(types.CellType, "cell", []))
            for cell in fn.closure
        ]
        helper = emit.name(self.out.install(make_function, "make_function"))
        f_globals = (
            self.globals_dict() if fn.f_globals is self.out.f_globals
            else emit.name(self.out.install(fn.f_globals, "globals"))
        )
        made = self._once(fn.fn_dict, lambda: emit.call(helper, [
            emit.name(self.out.install(fn.code, "code")), f_globals,
        ], {
            "defaults": emit.build("tuple", [self.expr(v) for v in fn.defaults]),
            "kwdefaults": emit.dict_display(
                [(emit.const(k), self.expr(v)) for k, v in fn.kwdefaults.items()]
            ),
            "cells": emit.build("tuple", cells),
            "annotations": (
                emit.const(None) if fn.annotations is None else self.expr(fn.annotations)
            ),
            "specials": emit.dict_display(
                [(emit.const(k), self.expr(v)) for k, v in fn.specials.items()]
            ),
            "attributes": self._dict(fn.fn_dict),
        }))
        for cell, where in zip(fn.closure, cells, strict=True):
            if cell.value is not None and id(cell) not in self._filled:
                self._filled.add(id(cell))
                self.lines.append(
                    emit.assign(emit.attr(where, "cell_contents"), self.expr(cell.value))
                )
        return made

    def _dict(self, box: DictBox) -> ast.expr:
        """A dict display of ``box``'s items (keys are constants)."""
        return emit.dict_display(
            [(self.constant(k), self.expr(v)) for k, v in box.items.items()]
        )

    def _fresh_set(self, items: frozenset[object]) -> ast.expr:
        return self._call(set, "set", [emit.name(self.out.install(items))])

    def constant(self, value: object) -> ast.expr:
        """A literal for a value of a literal type (exactly: an int subclass keeps its class by
        being installed as a global, like any other object), else the installed value."""
        if value is None or type(value) in (bool, int, str, bytes):
            return emit.const(value)
        if isinstance(value, MadeObjectId):
            raise Unsupported("the id() of an object made in the compiled function leaving it "
                              "(its number is only known when the code runs)")
        if type(value) is float and math.isfinite(value):  # type: ignore[arg-type]
            return emit.const(value)
        return emit.name(self.out.install(value))


def _plain_member(member: str) -> bool:
    """Whether ``base.member`` spells the attribute (else the read is a getattr call)."""
    return member.isidentifier() and not keyword.iskeyword(member)


def _read_step(source: Source, base_value: object) -> object:
    """What ``source`` reads from its base's value (the same read its guard makes)."""
    return source.get(base_value, {}, {})


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


def effect_lines(rebuilder: Rebuilder, out: Output) -> list[ast.stmt]:
    """The writes replaying the trace's side effects, in program order. Every value they use
    is read into a temporary first (``rebuilder.lines``), so a write never changes what a
    later value expression reads (``d.clear()`` then ``d['k']``)."""
    writes: list[ast.stmt] = []
    temp = rebuilder.bind

    def method_call(target: ast.expr, method: str, *args: ast.expr) -> None:
        writes.append(emit.expr_statement(emit.call(emit.attr(target, method), args)))

    for effect in out.side_effects:
        if isinstance(effect, AttrWrite):
            target = temp(rebuilder.expr(effect.target))
            value = temp(rebuilder.expr(effect.value))
            setter = rebuilder.constant(object.__setattr__ if effect.raw else builtins.setattr)
            writes.append(emit.expr_statement(
                emit.call(setter, [target, emit.const(effect.name), value])
            ))
        elif isinstance(effect, AttrDelete):
            target = temp(rebuilder.expr(effect.target))
            writes.append(emit.expr_statement(
                emit.call(emit.name("delattr"), [target, emit.const(effect.name)])
            ))
        elif isinstance(effect, DictSubclassWrite):  # objcore (#20): a frame dict subclass
            view = effect.target
            assert isinstance(view, DictVar) and isinstance(view.source, DictCopySource)
            target = temp(rebuilder.source(view.source.base_source))
            contents = temp(rebuilder._dict(view.box))
            writes.append(emit.expr_statement(
                emit.call(rebuilder.constant(replace_dict_items), [target, contents])
            ))
        elif isinstance(effect, HookRegistration):
            hook = temp(rebuilder.expr(effect.hook))
            method_call(temp(rebuilder.expr(effect.tensor)), "register_hook", hook)
        elif isinstance(effect, DeferredCall):
            args = [temp(rebuilder.expr(a)) for a in effect.args]
            method_call(temp(rebuilder.source(effect.receiver)), effect.name, *args)
        elif isinstance(effect, CellWrite):
            value = temp(rebuilder.expr(effect.value))
            writes.append(emit.assign(emit.name(effect.name), value))
        elif isinstance(effect, GlobalWrite):
            value = temp(rebuilder.expr(effect.value))
            target = emit.item(rebuilder.globals_dict(), emit.const(effect.name))
            writes.append(emit.assign(target, value))
        elif isinstance(effect, ContainerWrite):
            container = effect.target
            assert container.source is not None
            target = temp(rebuilder.source(container.source))
            if isinstance(container, ListVar):
                items = temp(emit.build("list", [rebuilder.expr(v) for v in container.box.items]))
                writes.append(emit.assign(emit.item(target, emit.whole_slice()), items))
            elif isinstance(container, DictVar):
                contents = temp(rebuilder._dict(container.box))
                method_call(target, "clear")
                method_call(target, "update", contents)
            elif isinstance(container, SetVar):
                # Only the difference: elements that stayed keep their place in the set.
                original = container.box.original or ()
                removed = tuple(v for v in original if v not in container.box.items)
                added = tuple(v for v in container.box.items if v not in original)
                method_call(target, "difference_update", rebuilder.constant(removed))
                method_call(target, "update", rebuilder.constant(added))
    final = _final_grad_mode(out)
    if final is not None and final != torch.is_grad_enabled():
        # ``torch.set_grad_enabled(False)`` as a statement leaves the mode switched after the
        # frame. The graph's own switch is no effect a backend keeps (aot traces through it),
        # so the transformed code replays the mode the graph ends in, like any other write.
        setter = rebuilder.constant(torch._C._set_grad_enabled)
        writes.append(emit.expr_statement(emit.call(setter, [emit.const(final)])))
    return writes


def _final_grad_mode(out: Output) -> bool | None:
    """The grad mode the graph's last switch leaves (None when it never switches); called with
    the tracer back at the frame's entry mode."""
    final = None
    for node in out.builder.graph.nodes:
        if node.op == "call_function" and node.target is torch._C._set_grad_enabled:
            final = bool(node.args[0])
    return final


@attrs.frozen(eq=False)
class Transformed:
    """The parts of one transformed function: the compiled graph's call (its global name, None
    when nothing was captured, and the argument expressions), the reads made before any write
    (``Rebuilder.lines``), the side-effect writes (:func:`effect_lines`), the returned
    expression, and the frame's cells it writes (declared ``nonlocal``)."""

    graph_call: str | None
    graph_args: list[ast.expr]
    reads: list[ast.stmt]
    writes: list[ast.stmt]
    return_expr: ast.expr
    nonlocals: list[str] = attrs.field(factory=list)

    def statements(self) -> list[ast.stmt]:
        """The function's statements. ``reads`` binding a shared source prefix or a parameter
        reader (``__strata_s<k> = ...``, see Rebuilder.source) come before the graph call,
        since the graph arguments may read through them."""
        body: list[ast.stmt] = [emit.nonlocal_(name) for name in self.nonlocals]
        body.extend(line for line in self.reads if _reads_at_entry(line))
        if self.graph_call is not None:
            graph = emit.call(emit.name(self.graph_call), _spread_readers(self.graph_args))
            body.append(emit.assign(emit.name(_OUT), graph))
        body.extend(line for line in self.reads if not _reads_at_entry(line))
        body.append(emit.assign(emit.name("__strata_result"), self.return_expr))
        body.extend(self.writes)
        body.append(emit.returns(emit.name("__strata_result")))
        return body


def cell_writes(out: Output) -> list[str]:
    """The frame's cells the trace wrote, sorted: the transformed code's ``nonlocal`` names."""
    return sorted({e.name for e in out.side_effects if isinstance(e, CellWrite)})


def build_code(original: types.CodeType, parts: Transformed) -> types.CodeType:
    """Assemble the transformed function and return its code object: its statements (what
    :func:`transformed_source` prints) as instructions through symbolic_vm.emit and
    symbolic_vm.bytecode, with the original's argument layout, free and cell variables."""
    nargs = _total_args(original)
    code = assemble(
        [*prologue(Signature.from_code(original)), *build_body(original, parts)],
        template=original,
        co_consts=(),
        co_names=(),
        co_varnames=original.co_varnames[:nargs],
        co_filename=f"<strata transformed {original.co_name}>",
        co_firstlineno=1,
    )
    _check_layout(original, code)
    return code


def build_body(original: types.CodeType, parts: Transformed) -> list[Instr | Label]:
    """The instructions of the transformed function's body (no prologue), in the names of
    ``original``: what :func:`build_code` assembles, and what a graph break's residual code
    inlines as its start (symbolic_vm.breaks.resume.inline_helper)."""
    body = parts.statements()
    if log.isEnabledFor(logging.DEBUG):
        log.debug("transformed code of %s:\n%s", original.co_name, _printout(original, body))
    nargs = _total_args(original)
    return emit.emit_body(
        body, params=original.co_varnames[:nargs],
        derefs=(*original.co_cellvars, *original.co_freevars), first_line=_FIRST_BODY_LINE,
    )


# The printout's first body line: line 1 is the def.
_FIRST_BODY_LINE = 2


def _reads_at_entry(statement: ast.stmt) -> bool:
    """Whether ``statement`` binds a shared source prefix or a parameter reader's tuple."""
    if not isinstance(statement, ast.Assign):
        return False
    target = statement.targets[0]
    return isinstance(target, ast.Name) and _ENTRY_READ.fullmatch(target.id) is not None


def transformed_source(original: types.CodeType, parts: Transformed) -> str:
    """The transformed function as Python text, for logs and dumps (:func:`build_code` builds
    the code object itself; line ``k`` of this text is line ``k`` of its positions)."""
    return _printout(original, parts.statements())


def _printout(original: types.CodeType, body: list[ast.stmt]) -> str:
    return f"def {original.co_name}({signature_text(original)}):\n" + "".join(
        f"    {emit.printout(line)}\n" for line in body
    )


def _reader_item(arg: ast.expr) -> tuple[str, int] | None:
    """(reader tuple, index) when ``arg`` is ``__strata_p<k>[j]``."""
    if (
        isinstance(arg, ast.Subscript) and isinstance(arg.value, ast.Name)
        and _READER_TUPLE.fullmatch(arg.value.id) and isinstance(arg.slice, ast.Constant)
        and type(arg.slice.value) is int
    ):
        return arg.value.id, arg.slice.value
    return None


def _spread_readers(graph_args: list[ast.expr]) -> list[ast.expr]:
    """``X[0], X[1], ..., X[n-1]`` -> ``*X`` where those are every item of reader tuple ``X``
    in the arguments, in order (one unpacking instead of n subscripts).

    Every parameter a reader serves is a graph input (Output.reader_group), so when the
    arguments hold ``X[0]`` to ``X[n-1]`` and no other item of ``X``, ``X`` has n items.
    """
    items = [_reader_item(arg) for arg in graph_args]
    out: list[ast.expr] = []
    i = 0
    while i < len(graph_args):
        match = items[i]
        if match is None or match[1] != 0:
            out.append(graph_args[i])
            i += 1
            continue
        name = match[0]
        end = i
        while end < len(graph_args) and (m := items[end]) is not None and (
            m[0] == name and m[1] == end - i
        ):
            end += 1
        others = any(m is not None and m[0] == name for m in items[end:])
        if others:
            out.extend(graph_args[i:end])
        else:
            out.append(emit.starred(emit.name(name)))
        i = end
    return out


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


def _holds_itself(var: ListVar | DictVar) -> bool:
    """Whether a list or dict holds itself, at any depth of lists, dicts and tuples."""
    seen: set[int] = set()
    todo = list(var.box.items if isinstance(var, ListVar) else var.box.items.values())
    while todo:
        item = todo.pop()
        if isinstance(item, (ListVar, DictVar)) and id(item.box) not in seen:
            if item.box is var.box:
                return True
            seen.add(id(item.box))
            todo += item.box.items if isinstance(item, ListVar) else item.box.items.values()
        elif isinstance(item, TupleVar):
            todo += item.items
    return False


def _total_args(code: types.CodeType) -> int:
    n = code.co_argcount + code.co_kwonlyargcount
    n += bool(code.co_flags & inspect.CO_VARARGS) + bool(code.co_flags & inspect.CO_VARKEYWORDS)
    return n


__all__ = [
    "Rebuilder", "Transformed", "build_body", "build_code", "cell_writes",
    "frame_names", "make_object", "transformed_source",
]
