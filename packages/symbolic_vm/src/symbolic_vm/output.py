"""What one capture accumulates: the graph under construction, inputs by source, guards, effects."""

from __future__ import annotations

import enum
import functools
import logging
import re
import types
from collections.abc import Callable, Mapping
from typing import Any, cast

import attrs
import sympy
import torch

from fxbuild import GraphBuilder
from symbolic_vm.aliasing import container_partition
from symbolic_vm.errors import Unsupported
from symbolic_vm.guard_api import (
    AttrSource,
    GuardSet,
    ItemSource,
    LocalSource,
    MethodCallSource,
    SizeSource,
    Source,
    UnsupportedGuardValue,
    shape_guards,
)
from symbolic_vm.records import CaptureConfig, DimsBySource
from symbolic_vm.values import (
    BoundMethodVar,
    ConstVar,
    DictBox,
    DictVar,
    FunctionVar,
    ListBox,
    ListVar,
    ModuleVar,
    ObjectVar,
    PartialVar,
    SetBox,
    SetVar,
    SymVar,
    TensorVar,
    TupleVar,
    Var,
    is_set_element,
)

log = logging.getLogger("strata.symbolic_vm")

# Values folded as constants; guarded by value (CONSTANT_MATCH) when read from the frame.
CONSTANT_TYPES: tuple[type, ...] = (
    int, float, bool, str, bytes, complex, type(None), type(Ellipsis), slice, range,
    torch.dtype, torch.device, torch.Size, torch.memory_format, torch.layout, enum.Enum,
    type(NotImplemented),
)


class MadeObjectId:
    """``id(obj)`` of an object whose real identity is only known when the transformed code runs
    (made while tracing: a list, an object, a graph tensor, ...), as a ConstVar's value.

    Equal only to the id of the same object, hashable (a dict key, a set element), true; any
    use that needs the number (arithmetic, ordering, printing, a comparison with a real int,
    leaving the frame: codegen refuses it) raises Unsupported, so the code runs eagerly
    rather than on a made-up number.
    """

    __slots__ = ("_of",)

    def __init__(self, of: object) -> None:
        self._of = of  # what identifies the object in the trace (its box, its graph node)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MadeObjectId):
            return self._of is other._of
        raise Unsupported("comparing the id() of an object made in the compiled function with "
                          "another number")

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash((MadeObjectId, id(self._of)))

    def __bool__(self) -> bool:
        return True  # no object has id 0

    def _needs_the_number(self, *args: object) -> Any:
        raise Unsupported("the id() of an object made in the compiled function used as a number "
                          "(only == and hashing are known while tracing)")

    __repr__ = __str__ = __format__ = __int__ = __index__ = __float__ = _needs_the_number
    __lt__ = __le__ = __gt__ = __ge__ = __neg__ = __pos__ = __abs__ = __invert__ = (
        _needs_the_number
    )
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _needs_the_number
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = (
        _needs_the_number
    )
    __pow__ = __rpow__ = __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = (
        _needs_the_number
    )
    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = __divmod__ = __rdivmod__ = (
        _needs_the_number
    )
    __round__ = __trunc__ = __floor__ = __ceil__ = _needs_the_number

    def __getattr__(self, name: str) -> Any:  # int's methods (bit_length, to_bytes, ...)
        if name.startswith("__"):
            raise AttributeError(name)  # protocol probes (copy's __deepcopy__, ...)
        return self._needs_the_number()


def is_constant_value(value: object) -> bool:
    """True when ``value`` is tracked as a ConstVar (tuples are tracked item by item)."""
    return isinstance(value, CONSTANT_TYPES)


def _is_dict_key(key: object) -> bool:
    """Whether a dict read from the frame can be tracked item by item with ``key`` as a key: a
    constant, or a class or typing form equal and hashed by identity only, so a lookup in the
    trace finds exactly what eager's would (huggingface_hub's validators: a dict keyed by
    ``typing.Union``, ``list``, ...). Other objects stay opaque: their keys would be folded."""
    if is_constant_value(key):
        return True
    kind = type(key)
    by_identity = kind.__hash__ is object.__hash__ and kind.__eq__ is object.__eq__
    return by_identity and (isinstance(key, type) or kind.__module__ == "typing")


def _nested_size_source(fake_source: Any, source: Source) -> Source | None:
    """Where a size symbol the fake-tensor converter made for an input (``<input>.size(0)``) or
    for a tensor hanging off it (``<input>.grad.size(0)``) lives in the frame, given the
    input's ``source``; None when ``fake_source`` is not such a size.

    The converter names them with torch's own source records (``.base``/``.member`` attribute
    chains ending at fxbuild's placeholder source, a size property ``.prop``/``.idx``); they
    are read by attribute, not imported.
    """
    prop, idx = getattr(fake_source, "prop", None), getattr(fake_source, "idx", None)
    if getattr(prop, "name", None) != "SIZE" or not isinstance(idx, int):
        return None
    members: list[str] = []
    base: Any = getattr(fake_source, "base", None)
    while isinstance(getattr(base, "member", None), str) and hasattr(base, "base"):
        members.append(base.member)
        base = base.base
    if not hasattr(base, "input_name"):
        return None
    out = source
    for member in reversed(members):
        out = AttrSource(out, member)
    return SizeSource(out, idx)


@attrs.frozen
class GuardRequest:
    """A guard the trace depends on; emitted into the GuardSet when the capture ends."""

    kind: str
    source: Source
    value: Any


@attrs.frozen
class AttrWrite:
    """``setattr(target, name, value)`` to replay after the graph runs; ``raw``: as
    ``object.__setattr__`` (the class's own ``__setattr__`` ran in the trace already)."""

    target: Var
    name: str
    value: Var
    raw: bool = False


@attrs.frozen
class AttrDelete:
    """``delattr(target, name)`` to replay after the graph runs (the class's ``__delattr__``
    is object's: attr_stores refuses any other)."""

    target: Var
    name: str


@attrs.frozen
class GlobalWrite:
    """Rebinding global ``name`` to ``value``."""

    name: str
    value: Var


@attrs.frozen
class ContainerWrite:
    """A list or dict from the frame whose contents changed: replay its final contents."""

    target: Var


@attrs.frozen
class CellWrite:
    """Assigning ``nonlocal name`` of the compiled frame (its closure cell)."""

    name: str
    value: Var


@attrs.frozen
class DictSubclassWrite:
    """A dict/OrderedDict subclass instance from the frame whose items changed (``target``: its
    items as a DictVar at ``DictCopySource(obj)``): replayed through the C base's own methods
    (``replace_dict_items``), so the class's Python ``__setitem__`` does not run again."""

    target: Var


def replace_dict_items(obj: dict[Any, Any], items: dict[Any, Any]) -> None:
    """Make ``obj``'s items ``items`` (in order) through its C base class, running no override."""
    base: Any = next(k for k in type(obj).__mro__ if not k.__flags__ & _HEAPTYPE)
    base.clear(obj)
    for key, value in items.items():
        base.__setitem__(obj, key, value)


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: set on classes made by a class statement


@attrs.frozen
class HookRegistration:
    """``tensor.register_hook(hook)`` on a frame input, replayed after the graph runs (where
    torch.compile registers hooks on inputs too); ``hook`` has a source, read at each call."""

    tensor: Var
    hook: Var


SideEffect = (
    AttrWrite | AttrDelete | GlobalWrite | ContainerWrite | CellWrite | DictSubclassWrite
    | HookRegistration
)


class Output:
    """The state shared by the root frame and every inlined call of one capture."""

    def __init__(
        self, f_globals: dict[str, Any], config: CaptureConfig, *, prefix: str = "__strata"
    ) -> None:
        self.prefix = prefix
        self.f_globals = f_globals
        self.config = config
        self.builder = GraphBuilder(
            dynamic=bool(config.dynamic),
            unbacked_scalars=config.capture_scalar_outputs,
            unbacked_sizes=config.capture_dynamic_output_shape_ops,
        )
        self._tensor_inputs: dict[int, TensorVar] = {}
        self._real_inputs: dict[int, torch.Tensor] = {}
        self._input_symbols: dict[int, dict[int, Any]] = {}
        # id(placeholder node) -> symbols made faking it, its .grad, ._base (see _wrap_tensor)
        self._faked_symbols: dict[int, set[Any]] = {}
        # Every graph input in creation order: tensors and SymInt ints (dynamic_ints).
        self._inputs: list[TensorVar | SymVar] = []
        self._int_inputs: dict[int, int] = {}  # id(placeholder node) -> the real int
        # id(placeholder node) -> its symbol, recorded now: specialising (int(n), range(n))
        # later replaces the SymInt's expression by the number.
        self._int_symbols: dict[int, Any] = {}
        # Each placeholder symbol -> where its value lives (SizeSource or the int's source).
        self._symbol_sources: dict[Any, Source] = {}
        self._by_source: dict[Source, Var] = {}
        self._by_id: dict[int, Var] = {}
        self._at_entry: dict[int, list[Any] | int] = {}  # box id -> keys / length at entry
        self._keep_alive: list[object] = []
        self._depended: set[int] = set()  # ids of placeholder nodes whose metadata was read
        self._guards: dict[tuple[str, Source], GuardRequest] = {}
        # PREDICATE guards: (expression, its operands by name) -> description
        self._predicates: dict[tuple[str, tuple[tuple[str, Source], ...]], str] = {}
        self.inlined_calls = 0  # user code run symbolically (it may have changed anything)
        self.side_effects: list[SideEffect] = []
        # Attribute writes on real objects, seen by later reads in the same trace.
        self.attr_overlay: dict[tuple[int, str], Var] = {}
        self.global_overlay: dict[str, Var] = {}  # globals rebound by the trace
        # Autocast modes entered in the tracer and not yet left (left if the capture fails).
        self.cleanups: list[Any] = []
        self._installs: dict[str, object] = {}
        self._install_ids: dict[int, str] = {}
        self.graph_index = 0
        # Names local to the transformed code (arguments, free and cell variables): a global
        # by one of these names is read there through the globals dict (codegen.Rebuilder).
        self.frame_names: frozenset[str] = frozenset()
        # Modules called at parent._modules[key]: parent -> {key: (its class, the class forward
        # inlined or None)}; one guards MODULE_CALLS per parent (_module_call_guards).
        self.module_calls: dict[Source, dict[str, tuple[type, object]]] = {}
        # Parameters the transformed code takes from a guards.params_reader instead of reading
        # their paths (codegen.Rebuilder): root module source -> [(parameter source, tensor)].
        # guard_set guards each one's identity at its path (MODULE_PARAMS, else ID_MATCH).
        self.reader_params: dict[Source, list[tuple[Source, torch.Tensor]]] = {}

    # -- wrapping real values ---------------------------------------------------------------

    def wrap(self, value: object, source: Source | None) -> Var:
        """Track a real Python value read from the frame at ``source``.

        One source always gives the same var, and one list/dict/object reached by two sources
        gives one var, so mutations are seen through every alias.
        """
        if source is not None:
            key = source
            known = self._by_source.get(key)
            if known is not None:
                return known
            if isinstance(value, (list, dict, set)):
                known = self._by_id.get(id(value))
                if known is not None:
                    self._by_source[key] = known  # an alias: aliasing.container_partition
                    return known
            var = self._wrap(value, source)
            self._by_source[key] = var
            if isinstance(var, (ListVar, DictVar)) and isinstance(value, (list, dict)):
                # Guards check the contents at entry, not after the trace changed them.
                self._at_entry[id(var.box)] = list(value) if isinstance(value, dict) else len(value)
            if isinstance(value, (list, dict, set)):
                self._by_id[id(value)] = var
                self._keep_alive.append(value)
            if isinstance(var, (TupleVar, ListVar, DictVar, SetVar, PartialVar)):
                # The VM models these as exactly their class (a list's own append, isinstance
                # answered by the class): whatever the trace does with one relies on it, so a
                # subclass must fail the guard, even where only the type was asked.
                self.request("TYPE_MATCH", source, value)
            return var
        return self._wrap(value, source)

    def tracked(self, value: object) -> Var | None:
        """The var already tracking list/dict/set ``value`` (read at some source), if any."""
        return self._by_id.get(id(value))

    def _wrap(self, value: object, source: Source | None) -> Var:
        if isinstance(value, torch.Tensor):
            return self._wrap_tensor(value, source)
        if type(value) is tuple or _is_namedtuple(value):
            assert isinstance(value, tuple)
            fields = tuple(getattr(type(value), "_fields", ()))
            return TupleVar(
                tuple(self.wrap(v, _item(source, i)) for i, v in enumerate(value)),
                fields=fields,
                named_type=type(value) if fields else None,
                source=source,
            )
        if type(value) is list:
            return ListVar(
                ListBox([self.wrap(v, _item(source, i)) for i, v in enumerate(value)]),
                source=source,
            )
        if type(value) is dict and all(_is_dict_key(k) for k in value):
            return DictVar(
                DictBox({k: self.wrap(v, _item(source, k)) for k, v in value.items()}),
                source=source,
            )
        if type(value) is set and all(is_set_element(v) for v in value):
            # A private copy: the trace changes it, the replay writes the difference back.
            original = tuple(value) if source is not None else None
            return SetVar(SetBox(set(value), original=original), source=source)
        if isinstance(value, int) and source is not None and self._is_dynamic_int(value, source):
            return self._wrap_int(value, source)
        if is_constant_value(value):
            return ConstVar(value, source=source)
        if isinstance(value, torch.nn.Module):
            return ModuleVar(value, source=source)
        if isinstance(value, types.FunctionType):
            return FunctionVar(value, source=source)
        if isinstance(value, types.MethodType) and isinstance(value.__func__, types.FunctionType):
            return BoundMethodVar(
                self.wrap(value.__self__, _attr(source, "__self__")),
                FunctionVar(value.__func__, source=_attr(source, "__func__")),
                source=source,
            )
        if type(value) is functools.partial:
            return PartialVar(
                self.wrap(value.func, _attr(source, "func")),
                tuple(
                    self.wrap(a, _item(_attr(source, "args"), i)) for i, a in enumerate(value.args)
                ),
                {k: self.wrap(v, _item(_attr(source, "keywords"), k))
                 for k, v in value.keywords.items()},
                source=source,
            )
        return ObjectVar(value, source=source)

    def _wrap_tensor(self, value: torch.Tensor, source: Source | None) -> TensorVar:
        # Faking reads the real tensor's metadata: never through a subclass's
        # __torch_function__ (user code eager runs only for the user's own operations).
        with torch._C.DisableTorchFunctionSubclass():
            return self._wrap_real_tensor(value, source)

    def _wrap_real_tensor(self, value: torch.Tensor, source: Source | None) -> TensorVar:
        known = self._tensor_inputs.get(id(value))
        if known is not None:
            if source is not None and known.source is not None and source != known.source:
                # One tensor reached by two paths (tied weights, an argument also held by a
                # module): the code reads the first path only, so the second must stay it.
                self.predicate(
                    "a is b",
                    f"{source.describe()} is still {known.source.describe()}",
                    a=source,
                    b=known.source,
                )
            return known
        if source is None:
            raise Unsupported("a tensor that the VM cannot name as a frame input")
        name = _placeholder_name(source)
        dims = _keyed(self.config.dynamic_dims, source) or frozenset()
        # Module parameters and buffers keep static sizes under dynamic=True, as torch.compile's
        # force_parameter_static_shapes does (they are guarded together by MODULE_PARAMS).
        static = isinstance(value, torch.nn.Parameter) or _is_buffer(source)
        kept = _keyed(self.config.static_dims, source)
        if kept and self.config.dynamic and not static:
            # mark_static under dynamic=True: only the other dims are symbolic.
            static, dims = True, frozenset(range(value.dim())) - kept
        shape_env = self.builder.shape_env
        symbols_before = set(shape_env.var_to_sources)
        node = self.builder.placeholder(name, value, dynamic_dims=dims, static=static)
        node.meta["source"] = source
        self._real_inputs[id(node)] = value
        # The symbols of its dynamic dims, recorded now: later specialisation replaces them.
        self._input_symbols[id(node)] = {
            d: size.node.expr
            for d, size in enumerate(node.meta["example_value"].shape)
            if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol)
        }
        for d, symbol in self._input_symbols[id(node)].items():
            self._symbol_sources.setdefault(symbol, SizeSource(source, d))
        # Faking a tensor fakes what hangs off it too (its .grad, a view's ._base), with
        # symbols of their own where the tensor's dims are dynamic, and ShapeEnv facts tie
        # them to the tensor's (a grad has its tensor's shape). Those facts are guarded like
        # any other, so their symbols need sources: the real tensor's .grad sizes, ...
        # (The input's own symbols are among them: a fact made while faking may already have
        # replaced one by the grad's, so the sizes read above can show the grad's symbol.)
        made: set[Any] = set()
        for symbol in set(shape_env.var_to_sources) - symbols_before:
            for fake_source in shape_env.var_to_sources.get(symbol, ()):
                size_source = _nested_size_source(fake_source, source)
                if size_source is not None:
                    self._symbol_sources.setdefault(symbol, size_source)
                    made.add(symbol)
                    break
        self._faked_symbols[id(node)] = made
        var = TensorVar(node, node.meta["example_value"], source=source)
        self._tensor_inputs[id(value)] = var
        self._inputs.append(var)
        return var

    def _is_dynamic_int(self, value: object, source: Source) -> bool:
        """An int argument (or an int inside list/tuple/dict arguments) traced as a SymInt.

        As torch.compile: only ints read from the frame's locals, items of them and fields of
        plain objects there (not globals, not module attributes); with dynamic=True all of them
        (0 and 1 too: torch.compile 2.13 compiles once for n = 0, 1, 2, 3), otherwise those
        automatic dynamic named.
        """
        if type(value) is not int or self.config.dynamic is False:
            return False
        root = source
        while isinstance(root, (ItemSource, AttrSource)):
            if isinstance(root, AttrSource):
                # Fields of plain objects passed in (a config instance) count, module
                # attributes do not (torch.compile keeps nn.Module ints static).
                holder = self._by_source.get(root.base_source)
                if not (isinstance(holder, ObjectVar) and _is_user_instance(holder.value)):
                    return False
            root = root.base_source
        if not isinstance(root, LocalSource):
            return False
        ints: frozenset[object] = self.config.dynamic_ints
        return self.config.dynamic is True or source in ints or source.name() in ints

    def _wrap_int(self, value: int, source: Source) -> SymVar:
        node = self.builder.placeholder(_placeholder_name(source), value, symbolic=True)
        node.meta["source"] = source
        example = node.meta["example_value"]
        self._int_inputs[id(node)] = value
        self._int_symbols[id(node)] = example.node.expr
        self._symbol_sources.setdefault(example.node.expr, source)
        var = SymVar(node, example, source=source)
        self._inputs.append(var)
        return var

    def real_input(self, var: TensorVar) -> torch.Tensor:
        """The real tensor behind input ``var``."""
        return self._real_inputs[id(var.node)]

    def tensor_type(self, var: TensorVar) -> type | None:
        """The real class of a tensor: its input's class (Parameter, ...); for a tensor made in
        the graph torch.Tensor, or None (unknown) when an input is of a tensor subclass whose
        ``__torch_function__`` gives results of its own class (eager's ``x * 2`` is then a
        subclass instance, which the graph's fake values do not show)."""
        real = self._real_inputs.get(id(var.node))
        if real is not None:
            return type(real)
        if any(_keeps_subclass(type(t)) for t in self._real_inputs.values()):
            return None
        return torch.Tensor

    def tensor_inputs(self) -> list[TensorVar]:
        """Tensor placeholders in creation order."""
        return list(self._tensor_inputs.values())

    def graph_inputs(self) -> list[TensorVar | SymVar]:
        """Every placeholder (tensors and SymInt ints) in creation order."""
        return list(self._inputs)

    def input_value(self, var: TensorVar | SymVar) -> object:
        """The real value (tensor or int) behind graph input ``var``."""
        if isinstance(var, SymVar):
            return self._int_inputs[id(var.node)]
        return self._real_inputs[id(var.node)]

    # -- guards -----------------------------------------------------------------------------

    def depend(self, var: Var) -> None:
        """Record that the trace relied on ``var``: guard its source the way its kind needs."""
        source = var.source
        if isinstance(var, TensorVar):
            self._depended.add(id(var.node))
            return
        if source is None:
            return
        if isinstance(var, ConstVar):
            if isinstance(var.value, (torch.dtype, torch.layout, torch.memory_format, enum.Enum)):
                self.request("ID_MATCH", source, var.value)
            else:
                # By eager's semantics, not ==: nan matches nan only, -0.0 is not 0.0, and
                # True, 1 and 1.0 are three guards (guards.ConstantMatch).
                self.request("CONSTANT_MATCH", source, var.value)
        elif isinstance(var, (TupleVar, ListVar)):
            self.request("TYPE_MATCH", source, _real_type(var))
            if isinstance(var, TupleVar) and var.named_type is not None:
                pass  # a namedtuple's class fixes its length
            elif isinstance(var, TupleVar):
                self.request("LENGTH", source, (None,) * len(var.items))
            else:
                length = self._at_entry.get(id(var.box), len(var.box.items))
                assert isinstance(length, int)
                self.request("LENGTH", source, [None] * length)
        elif isinstance(var, DictVar):
            self.request("TYPE_MATCH", source, {})
            keys = self._at_entry.get(id(var.box), list(var.box.items))
            assert isinstance(keys, list)
            self.request("DICT_KEYS", source, dict.fromkeys(keys))
        elif isinstance(var, SetVar) and var.box.original is not None:
            # Contents and iteration order (equal sets can iterate differently), compared by
            # repr: its elements are constants whose repr reads back (values.is_set_element),
            # so {True} is not {1} and {-0.0} not {0.0}, as eager tells them apart.
            self.request("TYPE_MATCH", source, set())
            self.predicate(
                f"repr(list(s)) == {repr(list(var.box.original))!r}",
                f"{source.describe()} holds {list(var.box.original)!r} in this order",
                s=source,
            )
        elif isinstance(var, PartialVar):
            # What a call of it passes: how many arguments and which keywords (func, the
            # arguments and the keyword values are guarded as they are used, by their sources;
            # its exact type is guarded when it is read, see wrap).
            self.request("LENGTH", AttrSource(source, "args"), (None,) * len(var.args))
            self.request("DICT_KEYS", AttrSource(source, "keywords"), dict.fromkeys(var.kwargs))
        elif isinstance(var, ModuleVar):
            self.request("ID_MATCH", source, var.module)
        elif isinstance(var, FunctionVar):
            self.request("ID_MATCH", source, var.fn)
        elif isinstance(var, ObjectVar):
            if _is_user_instance(var.value):
                self.request("TYPE_MATCH", source, var.value)
            else:
                self.request("ID_MATCH", source, var.value)

    def depend_storage_offset(self, var: TensorVar) -> None:
        """Record that the trace relied on ``var.storage_offset()``: TENSOR_MATCH does not
        check offsets, so guard the offset of each input whose storage ``var`` views (a
        tensor made in the graph owns a fresh storage; its offsets follow from the sizes)."""
        storage = var.example.untyped_storage()._cdata
        for known in self._tensor_inputs.values():
            if known.source is not None and known.example.untyped_storage()._cdata == storage:
                offset = self._real_inputs[id(known.node)].storage_offset()
                self._depended.add(id(known.node))
                self.request(
                    "CONSTANT_MATCH", MethodCallSource(known.source, "storage_offset"), offset
                )

    def request(self, kind: str, source: Source, value: object) -> None:
        """Ask for one guard (merged with an identical request)."""
        self._guards.setdefault((kind, source), GuardRequest(kind, source, value))

    def change_marks(self) -> tuple[int, ...]:
        """Counters that move when the trace changes what a graph break could not undo.

        A failing root-level handler either inlines user code (counted), adds graph nodes or
        effects (counted), or fails before it writes anything: every VM method that writes a
        list/dict/object/cell reads and checks its operands first.
        """
        return (len(self.builder.graph.nodes), len(self.side_effects), self.inlined_calls)

    def predicate(self, predicate: str, description: str, **operands: Source) -> None:
        """Guard a Python boolean expression over its ``operands`` (name -> Source, read by the
        check as every source is; a SHAPE-kind guard the log calls PREDICATE). Sources never
        travel as text: any attribute name or dict key a Source holds works."""
        self._predicates.setdefault((predicate, tuple(sorted(operands.items()))), description)

    def used_placeholder(self, var: TensorVar | SymVar) -> bool:
        """True when the graph or the trace relied on input ``var``."""
        return bool(var.node.users) or id(var.node) in self._depended

    def guard_set(self, live_inputs: list[TensorVar | SymVar]) -> GuardSet:
        """The guards of everything the trace depended on.

        Inputs whose symbols a ShapeEnv fact mentions are guarded too, live or not (a fake op
        that failed, or a branch on a size, may involve an input the graph no longer uses).
        """
        return self._guard_set(live_inputs)[0]

    def capture_guards(
        self, live_inputs: list[TensorVar | SymVar]
    ) -> tuple[GuardSet, Callable[[], GuardSet]]:
        """guard_set's guards, and a function giving them plus the ShapeEnv's facts at its call.

        A backend that traces the graph on its symbolic example inputs (aot) can add facts to
        this ShapeEnv after the capture (a size specialised, a relation) that its code relies
        on; the caller calls the function after the backends ran. It returns a new set: the
        captured guards as they are (global state and tensor metadata as at frame entry) and a
        SHAPE guard per fact over the symbols those guards cover -- a fact about any other
        symbol raises ShapeGuardError.
        """
        captured, symbol_sources = self._guard_set(live_inputs)

        def with_facts_now() -> GuardSet:
            guard_set = GuardSet()
            guard_set.update(captured)
            for predicate, description, operands in shape_guards(
                self.builder.shape_env, symbol_sources
            ):
                guard_set.SHAPE(predicate, description, operands=operands)
            return guard_set

        return captured, with_facts_now

    def _guard_set(
        self, live_inputs: list[TensorVar | SymVar]
    ) -> tuple[GuardSet, dict[Any, Source]]:
        """guard_set, and each symbol of the guarded inputs -> its source."""
        with torch._C.DisableTorchFunctionSubclass():  # as _wrap_tensor
            return self._guard_set_of_inputs(live_inputs)

    def _guard_set_of_inputs(
        self, live_inputs: list[TensorVar | SymVar]
    ) -> tuple[GuardSet, dict[Any, Source]]:
        guard_set = GuardSet()
        guard_set.GLOBAL_STATE()
        mentioned = self._mentioned_symbols()
        guarded: list[TensorVar | SymVar] = list(live_inputs)
        for var in self._inputs:
            if var not in guarded and self._symbols_of(var) & mentioned:
                guarded.append(var)
        int_inputs = [v for v in guarded if isinstance(v, SymVar)]
        live_tensors = [v for v in guarded if isinstance(v, TensorVar)]
        symbol_sources = self._sources_of_symbols(guarded)
        for var in int_inputs:
            assert var.source is not None  # int inputs always have one (see _wrap_int)
            guard_set.TYPE_MATCH(var.source, self._int_inputs[id(var.node)])
        # Parameters read as root._modules[..]...._parameters[name]: one MODULE_PARAMS per root
        # module (identity of the modules and parameters on the paths + each parameter's full
        # metadata), read the same way as the transformed code reads them.
        per_root: dict[
            Source, tuple[torch.nn.Module, list[str], list[tuple[Source, torch.Tensor]]]
        ] = {}
        for var in live_tensors:
            real = self._real_inputs[id(var.node)]
            assert var.source is not None  # inputs always have one (see _wrap_tensor)
            dims = self._input_symbols.get(id(var.node), {})
            path = None if dims else self._module_parameter(var.source, real)
            if path is not None:
                root, module, name = path
                per_root.setdefault(root, (module, [], []))[1].append(name)
                per_root[root][2].append((var.source, real))
                continue
            guard_set.TENSOR_MATCH(var.source, real, dynamic_dims=sorted(dims))
        pinned: set[Source] = set()  # modules whose identity MODULE_PARAMS checks
        identity_checked: set[Source] = set()  # parameters whose identity MODULE_PARAMS checks
        for root, (module, names, params) in per_root.items():
            try:
                guard_set.MODULE_PARAMS(root, module, names)
            except UnsupportedGuardValue:
                for source, real in params:
                    guard_set.TENSOR_MATCH(source, real)
                continue
            pinned.add(root)
            identity_checked.update(source for source, _ in params)
            for name in names:
                source = root
                for part in name.split(".")[:-1]:
                    source = ItemSource(AttrSource(source, "_modules"), part)
                    pinned.add(source)
        # A parameter the transformed code takes from a params_reader is sound only while the
        # object at its path is the one the reader holds: guarded above, or pinned here.
        for served in self.reader_params.values():
            for source, real in served:
                if source not in identity_checked:
                    guard_set.ID_MATCH(source, real)
        if symbol_sources:
            # Relations the trace relied on between symbolic sizes (x.size(0) == y.size(0), ...).
            for predicate, description, operands in shape_guards(
                self.builder.shape_env, symbol_sources
            ):
                guard_set.SHAPE(predicate, description, operands=operands)
        for (predicate, named), description in self._predicates.items():
            guard_set.SHAPE(predicate, description, label="PREDICATE", operands=dict(named))
        partition = container_partition(self._by_source)
        if partition is not None:
            guard_set.SHAPE(partition[0], partition[1], label="PREDICATE", operands=partition[2])
        self._module_call_guards(guard_set)
        for request in self._guards.values():
            if request.kind == "ID_MATCH" and request.source in pinned:
                continue  # MODULE_PARAMS already checks this module's identity
            if request.kind == "CONSTANT_MATCH" and isinstance(request.value, torch.Size):
                # A Size read from the frame: match its type, then its entries as a tuple.
                guard_set.TYPE_MATCH(request.source, request.value)
                expected = tuple(int(v) for v in request.value)
                guard_set.SHAPE(
                    f"tuple(size) == {expected!r}",
                    f"{request.source.describe()} is torch.Size({list(expected)})",
                    operands={"size": request.source},
                )
                continue
            try:
                getattr(guard_set, request.kind)(request.source, request.value)
            except UnsupportedGuardValue:
                # A constant the guards cannot compare by value: pin the object itself.
                guard_set.ID_MATCH(request.source, request.value)
        return guard_set, symbol_sources

    def reader_group(self, source: Source) -> tuple[Source, list[tuple[Source, torch.Tensor]]]:
        """For a graph input read as ``root._modules[..]...._parameters[w]`` that guard_set will
        put under ``root``'s MODULE_PARAMS: ``root`` and every such input under it that the
        graph uses, in graph-input order (the transformed code may read them all through one
        ``guards.params_reader``). Raises KeyError for any other source."""
        root = self._parameter_root(source)
        if root is None:
            raise KeyError(source)
        known = self.reader_params.get(root)
        if known is None:
            known = [
                (var.source, self._real_inputs[id(var.node)])
                for var in self._tensor_inputs.values()
                if var.node.users and var.source is not None
                and self._parameter_root(var.source) == root
            ]
            self.reader_params[root] = known
        return root, known

    def _parameter_root(self, source: Source) -> Source | None:
        """The root module source when ``source`` is a live, static graph input that is a
        module parameter MODULE_PARAMS covers (guard_set's own test), else None."""
        var = self._by_source.get(source)
        if not isinstance(var, TensorVar) or var.source != source or not var.node.users:
            return None
        if self._input_symbols.get(id(var.node)):
            return None
        path = self._module_parameter(source, self._real_inputs[id(var.node)])
        return None if path is None else path[0]

    def _sources_of_symbols(self, guarded: list[TensorVar | SymVar]) -> dict[Any, Source]:
        """Each symbol of the ``guarded`` inputs -> where its value lives."""
        return {
            symbol: source
            for var in guarded
            for symbol in self._symbols_of(var)
            if (source := self._symbol_sources.get(symbol)) is not None
        }

    def _symbols_of(self, var: TensorVar | SymVar) -> set[Any]:
        if isinstance(var, SymVar):
            return {self._int_symbols[id(var.node)]}
        return set(self._input_symbols.get(id(var.node), {}).values()) | self._faked_symbols.get(
            id(var.node), set()
        )

    def _mentioned_symbols(self) -> set[Any]:
        """Placeholder symbols that a ShapeEnv guard or specialisation refers to."""
        shape_env = self.builder.shape_env
        mentioned: set[Any] = set()
        for guard in shape_env.guards:
            mentioned |= guard.expr.free_symbols
        for symbol, value in shape_env.replacements.items():
            mentioned.add(symbol)
            mentioned |= value.free_symbols
        return mentioned & self._symbol_sources.keys()

    def _module_call_guards(self, guard_set: GuardSet) -> None:
        # One MODULE_CALLS per parent _modules dict (guards' C++ ModuleCallsCheck when built).
        for parent, calls in self.module_calls.items():
            guard_set.MODULE_CALLS(
                parent, [(key, cls, forward) for key, (cls, forward) in calls.items()]
            )

    def _module_parameter(
        self, source: Source, real: torch.Tensor
    ) -> tuple[Source, torch.nn.Module, str] | None:
        """For ``root._modules[a]._modules[b]._parameters[w]`` holding ``real`` now, with
        ``root`` a module the trace read: (root's source, the module, ``"a.b.w"``)."""
        parts: list[str] = []
        node: Source = source
        table = "_parameters"
        while isinstance(node, ItemSource) and isinstance(node.index, str):
            holder = node.base_source
            if not (isinstance(holder, AttrSource) and holder.member == table):
                break
            parts.append(node.index)
            node = holder.base_source
            table = "_modules"
        if not parts or table != "_modules":  # no _parameters step at the end
            return None
        root_var = self._by_source.get(node)
        if not isinstance(root_var, ModuleVar):
            return None
        owner: Any = root_var.module
        for part in reversed(parts[1:]):
            owner = owner._modules.get(part)
            if not isinstance(owner, torch.nn.Module):
                return None
        if owner._parameters.get(parts[0]) is not real:
            return None
        return node, root_var.module, ".".join(reversed(parts))

    # -- helper globals ---------------------------------------------------------------------

    def install(self, value: object, stem: str = "const") -> str:
        """A global name the transformed code can use to reach ``value``."""
        known = self._install_ids.get(id(value))
        if known is not None:
            return known
        name = f"{self.prefix}_{stem}_{len(self._installs)}"
        self._installs[name] = value
        self._install_ids[id(value)] = name
        return name

    @property
    def installs(self) -> dict[str, object]:
        """Helper globals the transformed code needs."""
        return dict(self._installs)


def _keeps_subclass(cls: type) -> bool:
    """Whether ops on a ``cls`` tensor may return ``cls`` instances (Parameter and Buffer turn
    their torch function off: their results are plain tensors)."""
    return cls is not torch.Tensor and (
        getattr(cls, "__torch_function__", None) is not torch._C._disabled_torch_function_impl
    )


def _is_namedtuple(value: object) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_make") and hasattr(
        type(value), "_fields"
    )


def _type_probe(cls: type) -> object:
    return cls.__new__(cls, *([None] * len(getattr(cls, "_fields", ()))))


def _real_type(var: Var) -> object:
    if isinstance(var, TupleVar) and var.named_type is not None:
        return _type_probe(var.named_type)
    return () if isinstance(var, TupleVar) else []


_LIBRARY_MODULES = ("builtins", "torch", "torch._C", "math", "operator", "functools", "typing")
_NOT_INSTANCES = (
    type, types.ModuleType, types.BuiltinFunctionType, types.FunctionType, types.MethodType,
    types.BuiltinMethodType,
)


def _is_user_instance(value: object) -> bool:
    """Instances of user classes are guarded by type (their attributes are guarded on use)."""
    return (
        not isinstance(value, _NOT_INSTANCES)
        # On the class: an instance lookup could run the class's own __getattr__.
        and not callable(getattr(type(value), "__torch_function__", None))
        and type(value).__module__ not in _LIBRARY_MODULES
    )


def _keyed(table: DimsBySource, source: Source) -> frozenset[int] | None:
    """``table``'s entry for ``source``: keyed by the Source, or by its text (older callers)."""
    by_source = cast(Mapping[object, frozenset[int]], table)
    found = by_source.get(source)
    return found if found is not None else by_source.get(source.name())


def _is_buffer(source: Source) -> bool:
    """Whether ``source`` reads through some module's ``_buffers`` dict."""
    return any(
        isinstance(step, ItemSource)
        and isinstance(step.base_source, AttrSource)
        and step.base_source.member == "_buffers"
        for step in source.chain()
    )


def _item(source: Source | None, index: object) -> Source | None:
    return None if source is None else ItemSource(source, index)


def _attr(source: Source | None, name: str) -> Source | None:
    return None if source is None else AttrSource(source, name)


_MODULE_TABLE_STEP = re.compile(r"\._(?:modules|parameters|buffers)\['([A-Za-z0-9_]*)'\]")


def _placeholder_name(source: Source) -> str:
    """``L['self'].fc.weight`` -> ``L_self_fc_weight`` (Dynamo's style for input names); module
    state read through its dicts is named by its attribute path (``L['self']._modules['fc']
    ._parameters['weight']`` -> ``L_self_fc_weight`` too)."""
    text = _MODULE_TABLE_STEP.sub(r".\1", source.name())
    if text.startswith("L['") and text.endswith("']") and text.count("'") == 2:
        return text[3:-2]
    out = "".join(ch if ch.isalnum() else "_" for ch in text)
    while "__" in out:
        out = out.replace("__", "_")
    return out.strip("_")
