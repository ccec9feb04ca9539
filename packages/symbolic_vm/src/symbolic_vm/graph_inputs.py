"""A capture's graph inputs: real values read from the frame, tracked by source (one var per
source, one var per container however many sources reach it), tensors and dynamic ints made graph
placeholders with the symbols of their sizes and where each symbol's value lives."""

from __future__ import annotations

import functools
import re
import types
import weakref
from collections.abc import Mapping
from typing import Any, TypeGuard, cast

import sympy
import torch

from fxbuild import GraphBuilder
from symbolic_vm.constant_values import is_constant_value
from symbolic_vm.errors import Unsupported
from symbolic_vm.guard_api import AttrSource, ItemSource, LocalSource, SizeSource, Source
from symbolic_vm.guard_requests import GuardRequests
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
    is_guarded_set_element,
)


def _is_dict_key(key: object) -> bool:
    """Whether a dict read from the frame can be tracked item by item with ``key`` as a key: a
    constant, or a class, typing form or Python function equal and hashed by identity only, so
    a lookup in the trace finds exactly what eager's would (huggingface_hub's validators: a dict
    keyed by ``typing.Union``, ``list``, ...; ``{namedtuple: ...}``). Other objects stay
    opaque: their keys would be folded."""
    if is_constant_value(key):
        return True
    kind = type(key)
    by_identity = kind.__hash__ is object.__hash__ and kind.__eq__ is object.__eq__
    if isinstance(key, weakref.ref) and kind is weakref.ref:
        # A WeakKeyDictionary's keys: equal and hashed as their live referent, here one
        # compared by identity (a module, ...): the keys then match exactly as eager's.
        target = key()
        referent: Any = type(target) if target is not None else None
        return referent is not None and (
            referent.__hash__ is object.__hash__ and referent.__eq__ is object.__eq__
        )
    return by_identity and (
        isinstance(key, type) or kind.__module__ == "typing" or kind is types.FunctionType
    )


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


class GraphInputs(GuardRequests):
    """The inputs one capture reads from the frame (the graph's placeholders among them)."""

    def __init__(self, config: CaptureConfig) -> None:
        super().__init__()
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
        self._int_inputs: dict[int, float] = {}  # id(placeholder node) -> the real int/float
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
            lbox = ListBox([])
            var: Var = self._known_early(value, ListVar(lbox, source=source))
            lbox.items.extend(self.wrap(v, _item(source, i)) for i, v in enumerate(value))
            return var
        if type(value) is dict and all(_is_dict_key(k) for k in value):
            dbox = DictBox({})
            var = self._known_early(value, DictVar(dbox, source=source))
            dbox.items.update((k, self.wrap(v, _item(source, k))) for k, v in value.items())
            if "capturable" in value and self._is_optimizer_group(source):
                dbox.items["capturable"] = ConstVar(True)
            return var
        if type(value) is set and all(is_guarded_set_element(v) for v in value):
            # A private copy: the trace changes it, the replay writes the difference back.
            original = tuple(value) if source is not None else None
            return SetVar(SetBox(set(value), original=original), source=source)
        if isinstance(value, int) and source is not None and self._is_dynamic_int(value, source):
            return self._wrap_int(value, source)
        if type(value) is float and self._is_dynamic_option(source):
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

    def _is_dynamic_option(self, source: Source | None) -> TypeGuard[Source]:
        """A float option of an optimizer's param group (its ``lr``, which a scheduler changes)
        that changed since an earlier compile: a SymFloat input, as torch.compile makes it,
        not one recompile per value. Other floats stay constants."""
        return (
            isinstance(source, ItemSource)
            and source in self.config.dynamic_ints
            and self._is_optimizer_group(source.base_source)
        )

    def _is_optimizer_group(self, source: Source | None) -> bool:
        """Whether ``source`` is ``opt.param_groups[i]`` of a torch optimizer.

        The trace reads such a group's ``capturable`` as True, as torch.compile's does: the
        optimizer's capturable branches keep step counts and bias corrections as tensors, where
        the others call ``.item()`` or pass a stacked tensor of scalars to a foreach op (no fake
        kernel: the foreach step could not be traced). The real group is not changed.
        """
        if not isinstance(source, ItemSource):
            return False
        groups = source.base_source
        if not (isinstance(groups, AttrSource) and groups.member == "param_groups"):
            return False
        holder = self._by_source.get(groups.base_source)
        return isinstance(holder, ObjectVar) and isinstance(holder.value, torch.optim.Optimizer)

    def _known_early(self, value: object, var: Var) -> Var:
        """Track a list/dict from the frame before its items are wrapped: one that holds itself
        (``l.append(l)``) reaches this same var again (and its guard says it is itself)."""
        if var.source is not None:
            self._by_id[id(value)] = var
            self._keep_alive.append(value)
        return var

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
            if isinstance(root, AttrSource) and root.member == "cell_contents":
                # What a closure passed in closes over (torch.compile makes those ints
                # dynamic too): the cell's own path, ``fn.__closure__[i]``, is skipped.
                closure = root.base_source
                if isinstance(closure, ItemSource) and isinstance(
                    closure.base_source, AttrSource
                ) and closure.base_source.member == "__closure__":
                    root = closure.base_source.base_source
                    continue
            if isinstance(root, AttrSource):
                # Fields of plain objects passed in (a config instance) count, module
                # attributes do not (torch.compile keeps nn.Module ints static).
                holder = self._by_source.get(root.base_source)
                if not (isinstance(holder, ObjectVar) and is_user_instance(holder.value)):
                    return False
            root = root.base_source
        if not isinstance(root, LocalSource):
            return False
        ints: frozenset[object] = self.config.dynamic_ints
        return self.config.dynamic is True or source in ints or source.name() in ints

    def _wrap_int(self, value: float, source: Source) -> SymVar:
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


_LIBRARY_MODULES = ("builtins", "torch", "torch._C", "math", "operator", "functools", "typing")
_NOT_INSTANCES = (
    type, types.ModuleType, types.BuiltinFunctionType, types.FunctionType, types.MethodType,
    types.BuiltinMethodType,
)


def is_user_instance(value: object) -> bool:
    """Instances of user classes are guarded by type (their attributes are guarded on use)."""
    return (
        not isinstance(value, _NOT_INSTANCES)
        # On the class: an instance lookup could run the class's own __getattr__.
        and not callable(getattr(type(value), "__torch_function__", None))
        and type(value).__module__ not in _LIBRARY_MODULES
    )


def unguarded_contents(value: object) -> bool:
    """An instance of a user list/set subclass: guarded by its class (is_user_instance), not by
    what it holds, so a value the trace folds from its contents could go stale."""
    return (
        isinstance(value, (list, set, bytearray)) and type(value).__module__ != "builtins"
        and is_user_instance(value)
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
