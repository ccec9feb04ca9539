"""The guard plan: what the trace relied on (``depend``), and the GuardSet built from it when
the capture ends -- tensor metadata and module parameters, the ShapeEnv's facts over the inputs'
symbols, predicates, module calls and the merged guard requests."""

from __future__ import annotations

import enum
import types
from collections.abc import Callable
from typing import Any

import torch

from symbolic_vm.aliasing import container_partition
from symbolic_vm.errors import Unsupported
from symbolic_vm.graph_inputs import GraphInputs, is_user_instance
from symbolic_vm.guard_api import (
    AttrSource,
    GuardSet,
    ItemSource,
    LocalSource,
    MethodCallSource,
    SetItemsSource,
    Source,
    UnsupportedGuardValue,
    shape_guards,
)
from symbolic_vm.records import CaptureConfig
from symbolic_vm.values import (
    ConstVar,
    DictVar,
    FunctionVar,
    ListVar,
    ModuleVar,
    ObjectVar,
    PartialVar,
    SetVar,
    SymVar,
    TensorVar,
    TupleVar,
    Var,
    holds_nan,
    is_guarded_constant,
    is_set_element,
)

_MUTABLE_BUILTINS = (set, dict, list, bytearray)


_PLAIN_ARGS = (type(None), bool, int, float, str, bytes)


def _told_by_type_and_args(value: object) -> bool:
    """A builtin exception whose str and repr follow from its type and its args."""
    cls = type(value)
    return (
        isinstance(value, BaseException) and cls.__module__ == "builtins"
        and cls.__str__ in (BaseException.__str__, KeyError.__str__)
        and cls.__repr__ is BaseException.__repr__
    )


class GuardPlan(GraphInputs):
    """Turns what the trace depended on into guards (the layer of Output above its inputs)."""

    def __init__(self, config: CaptureConfig) -> None:
        super().__init__(config)
        self._depended: set[int] = set()  # ids of placeholder nodes whose metadata was read
        # Modules called at parent._modules[key]: parent -> {key: (its class, the class forward
        # inlined or None)}; one guards MODULE_CALLS per parent (_module_call_guards).
        self.module_calls: dict[Source, dict[str, tuple[type, object]]] = {}
        # Parameters the transformed code takes from a guards.params_reader instead of reading
        # their paths (codegen.Rebuilder): root module source -> [(parameter source, tensor)].
        # guard_set guards each one's identity at its path (MODULE_PARAMS, else ID_MATCH).
        self.reader_params: dict[Source, list[tuple[Source, torch.Tensor]]] = {}

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
            elif holds_nan(var.value):
                # nan != nan: containers and sets find it by identity (``x is y`` before ==),
                # and so does the trace on the real object; another nan may answer otherwise.
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
            self._depend_set_contents(source, var.box.original)
        elif isinstance(var, PartialVar):
            # What a call of it passes: how many arguments and which keywords (func, the
            # arguments and the keyword values are guarded as they are used, by their sources;
            # its exact type is guarded when it is read, see wrap).
            self.request("LENGTH", AttrSource(source, "args"), (None,) * len(var.args))
            self.request("DICT_KEYS", AttrSource(source, "keywords"), dict.fromkeys(var.kwargs))
        elif isinstance(var, ModuleVar):
            # A shared module: by class (what the trace read from it is guarded at its own
            # source); else by identity.
            kind = "TYPE_MATCH" if self.module_shared(source) else "ID_MATCH"
            self.request(kind, source, var.module)
        elif isinstance(var, FunctionVar):
            func: object = var.fn
            if (
                isinstance(func, types.FunctionType)
                and func.__closure__
                and func.__defaults__ is None
                and func.__kwdefaults__ is None
            ):
                # A closure made anew per call of its maker (a nested def): guarded by its
                # code, as torch.compile does; the cells it read are guarded by their sources.
                # By identity, each new closure would recompile the frame.
                self.request("TYPE_MATCH", source, func)
                self.request("ID_MATCH", AttrSource(source, "__code__"), func.__code__)
            else:
                self.request("ID_MATCH", source, func)
        elif isinstance(var, ObjectVar):
            if is_user_instance(var.value):
                self.request("TYPE_MATCH", source, var.value)
            elif type(var.value) in _MUTABLE_BUILTINS:
                # A set/dict/list the VM could not model item by item (a function, a NaN, a
                # tensor key): its identity says nothing of what it holds when the guard runs,
                # so what the trace read from it could go stale. Run the statement eagerly.
                raise Unsupported(
                    f"reading {source.describe()}, a {type(var.value).__name__} holding values "
                    "whose contents cannot be guarded (only str, int, float, bytes and tuples "
                    "of them are); the statement runs eagerly"
                )
            elif _told_by_type_and_args(var.value):
                # A builtin exception (an except block's ``e`` passed on): its type and args
                # are all str/repr/args read; by identity the guard would hold it, its
                # traceback and the frames there, and recompile for every new one. An
                # argument that is not a constant is guarded by identity (weakly where it can
                # be: its repr may show its address).
                self.request("TYPE_MATCH", source, var.value)
                args_source = AttrSource(source, "args")
                args = var.value.args
                if all(type(a) in _PLAIN_ARGS for a in args):
                    self.request("CONSTANT_MATCH", args_source, args)
                else:
                    self.request("LENGTH", args_source, args)
                    for i, arg in enumerate(args):
                        kind = "CONSTANT_MATCH" if type(arg) in _PLAIN_ARGS else "ID_MATCH"
                        self.request(kind, ItemSource(args_source, i), arg)
            else:
                self.request("ID_MATCH", source, var.value)

    def _depend_set_contents(self, source: Source, original: tuple[Any, ...]) -> None:
        """Guard a set from the frame to hold ``original`` in this iteration order (equal sets
        can iterate differently)."""
        self.request("TYPE_MATCH", source, set())
        if all(is_set_element(v) for v in original):
            # One comparison by repr: the elements are constants whose repr reads back, so
            # {True} is not {1} and {-0.0} not {0.0}, as eager tells them apart.
            self.predicate(
                f"repr(list(s)) == {repr(list(original))!r}",
                f"{source.describe()} holds {list(original)!r} in this order",
                s=source,
            )
            return
        # Element by element (values.is_guarded_set_element): a constant by value (1j only
        # matches 1j), a function or a nan by identity, as the set itself tells them apart (a
        # lookup tries ``is`` before ``==``, and nan != nan).
        items = SetItemsSource(source)
        self.request("LENGTH", items, original)
        for i, element in enumerate(original):
            by_value = is_guarded_constant(element) and not holds_nan(element)
            kind = "CONSTANT_MATCH" if by_value else "ID_MATCH"
            self.request(kind, ItemSource(items, i), element)

    def module_shared(self, source: Source | None) -> bool:
        """Whether a module at ``source`` is guarded without its identity: it is reached from
        a frame local that is not pinned (CaptureConfig.inline_inbuilt_nn_modules)."""
        if source is None or not self.config.inline_inbuilt_nn_modules:
            return False
        root = source.root()
        return isinstance(root, LocalSource) and root.local_name not in self.config.pinned_locals

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
            shared = self.module_shared(root)
            try:
                guard_set.MODULE_PARAMS(root, module, names, identity=not shared)
            except UnsupportedGuardValue:
                for source, real in params:
                    guard_set.TENSOR_MATCH(source, real)
                continue
            if shared:
                continue  # no identity checked: the code reads each parameter at its path
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
                held = _numpy_number(request.value)
                if held is not None:
                    # np.float64 (a float subclass): its type and the number it holds, so an
                    # equal scalar made on the next call matches (repr: nan, -0.0 apart).
                    guard_set.TYPE_MATCH(request.source, request.value)
                    guard_set.SHAPE(
                        f"repr(s.item()) == {repr(held)!r}",
                        f"{request.source.describe()} holds {held!r}",
                        label="PREDICATE",
                        operands={"s": request.source},
                    )
                    continue
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
        if path is None or self.module_shared(path[0]):
            return None  # a shared module's parameters are read at their paths on each call
        return path[0]

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


def _type_probe(cls: type) -> object:
    return cls.__new__(cls, *([None] * len(getattr(cls, "_fields", ()))))


def _real_type(var: Var) -> object:
    if isinstance(var, TupleVar) and var.named_type is not None:
        return _type_probe(var.named_type)
    return () if isinstance(var, TupleVar) else []


def _numpy_number(value: object) -> object | None:
    """The Python number a NumPy scalar constant holds (np.float64 is tracked as a float),
    else None; NumPy is recognised by the value's type, never imported here."""
    kind = type(value)
    if kind.__module__ != "numpy" or not hasattr(value, "item"):
        return None
    held = value.item()
    return held if type(held) in (bool, int, float, complex) else None
