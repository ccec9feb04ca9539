"""nn.Module values: attributes, parameters and buffers as graph inputs, calls inline forward."""

from __future__ import annotations

import inspect
import types
from typing import TYPE_CHECKING, Any, cast

import torch
from torch.nn.modules import module as module_impl

from symbolic_vm import object_attrs, type_trackers
from symbolic_vm import operations as ops
from symbolic_vm.class_dicts import MISSING, class_lookup, is_data_descriptor
from symbolic_vm.errors import Unsupported, folding_error
from symbolic_vm.guard_api import AttrSource, GlobalSource, InstanceAttrSource, ItemSource, Source
from symbolic_vm.module_tables import STATE_TABLES, has_stock_len, state_source
from symbolic_vm.values import (
    BoundMethodVar,
    ConstVar,
    DictBox,
    DictVar,
    FunctionVar,
    IteratorVar,
    IterBox,
    ListVar,
    MethodVar,
    ModuleVar,
    SequentialSliceVar,
    TensorVar,
    TupleVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter
    from symbolic_vm.output import Output


def module_attr(vm: Interpreter, obj: ModuleVar, name: str) -> Var:
    """``module.name`` in Python's lookup order: a data descriptor of the class, the instance
    ``__dict__``, other class attributes, then ``nn.Module.__getattr__``'s tables (parameters,
    buffers, submodules: parameters/buffers become graph inputs, submodules stay modules)."""
    out = vm.out
    module = obj.module
    overlay = out.attr_overlay.get((id(module), name))
    if overlay is not None:
        return overlay
    out.depend(obj)
    source = AttrSource(obj.source, name) if obj.source is not None else None
    class_attr = class_lookup(type(module), name)
    if isinstance(class_attr, (types.GetSetDescriptorType, types.MemberDescriptorType)):
        # Slots and ``__dict__``: the value the descriptor gives, read at its source.
        return out.wrap(class_attr.__get__(module, type(module)), source)
    if class_attr is not MISSING and is_data_descriptor(class_attr):
        return _class_member(vm, obj, name, class_attr)
    if name in module.__dict__:
        return out.wrap(module.__dict__[name], source)
    if name in _MODULE_ITERATORS:
        return MethodVar(obj, name)
    if class_attr is not MISSING:
        return _class_member(vm, obj, name, class_attr)
    for table in STATE_TABLES:
        entries = module.__dict__.get(table, {})
        if name in entries:
            value = entries[name]
            where = state_source(obj.source, module, table, name)
            return ConstVar(None, source=where) if value is None else out.wrap(value, where)
    fallback = class_lookup(type(module), "__getattr__")
    if isinstance(fallback, types.FunctionType) and fallback is not torch.nn.Module.__getattr__:
        return _own_getattr(vm, obj, name, fallback)
    raise Unsupported(f"{type(module).__name__} module has no attribute {name!r}")


def _own_getattr(vm: Interpreter, obj: ModuleVar, name: str, fallback: Any) -> Var:
    """``module.name`` that neither the class, the instance dict nor the parameter, buffer
    and submodule tables hold, on a class with its own ``__getattr__``: that method traced as
    a call (its ``super().__getattr__(name)`` inlines nn.Module's, whose AttributeError it
    may catch), guarded on the name staying missing and the method staying the class's."""
    if obj.source is not None:
        object_attrs.guard_method_resolution(vm.out, obj.source, obj.module, "__getattr__",
                                             fallback)
        tables = " and ".join(f"{name!r} not in d[{t!r}]" for t in STATE_TABLES)
        vm.out.predicate(
            f"{name!r} not in d and {tables}",
            f"{obj.source.describe()}.{name} is still unset",
            d=InstanceAttrSource(obj.source, "__dict__"),
        )
    return vm.call(BoundMethodVar(obj, FunctionVar(fallback)), [ConstVar(name)], {})


def _class_member(vm: Interpreter, obj: ModuleVar, name: str, attr: object) -> Var:
    out = vm.out
    if obj.source is not None:  # the class attribute patched, or shadowed on the instance
        object_attrs.guard_method_resolution(out, obj.source, obj.module, name, attr)
    if isinstance(attr, types.FunctionType):
        return BoundMethodVar(obj, FunctionVar(attr))
    if isinstance(attr, property) and attr.fget is not None:
        return vm.call(out.wrap(attr.fget, None), [obj], {})
    if isinstance(attr, staticmethod):
        return out.wrap(attr.__func__, None)
    if isinstance(attr, classmethod):
        return BoundMethodVar(out.wrap(type(obj.module), None), out.wrap(attr.__func__, None))
    return out.wrap(attr, None)


# Generator methods of nn.Module answered by the VM with lists of sourced values.
_MODULE_ITERATORS = frozenset({
    "modules", "children", "named_modules", "named_children", "parameters", "named_parameters",
    "buffers", "named_buffers",
})


_NAMED_KINDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def module_iterator(
    vm: Interpreter, obj: ModuleVar, name: str, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    """``module.parameters()`` and friends: an iterator over values named by their sources.

    What they yield depends on the keys of every ``_modules`` dict of the tree they walk and
    of its ``_parameters``/``_buffers`` dicts: each of those gets a DICT_KEYS guard (a
    parameter, buffer or submodule added or removed later recompiles). With ``nn.Module``'s
    own methods the values are read through the same dicts (``..._modules['a']._parameters
    ['weight']``); a class that overrides the method keeps the attribute path.
    """
    out = vm.out
    out.depend(obj)
    py_args = [ops.const_value(out, a) for a in args]
    py_kwargs = {k: ops.const_value(out, v) for k, v in kwargs.items()}
    named = name.startswith("named_")
    base = name.removeprefix("named_")
    if not named and py_args:
        # By keyword: ``parameters(recurse)``'s first parameter is named_parameters' second.
        signature = inspect.signature(getattr(obj.module, name))
        try:
            bound = signature.bind(*py_args, **py_kwargs)
        except TypeError as exc:  # eager's TypeError for arguments it does not take
            raise folding_error(exc, f"module.{name}()") from None
        if all(p.kind in _NAMED_KINDS for p in signature.parameters.values()):
            py_args, py_kwargs = [], dict(bound.arguments)
    method = getattr(obj.module, name if named else f"named_{name}")
    try:
        entries = list(method(*py_args, **py_kwargs))
    except Exception as exc:  # named_parameters(False): eager raises the same
        raise folding_error(exc, f"module.{name}()") from None
    stock = (
        getattr(type(obj.module), f"named_{base}", None)
        is getattr(torch.nn.Module, f"named_{base}", None)
        and not py_args
        and set(py_kwargs) <= {"recurse", "remove_duplicate"}  # no prefix: names are paths
    )
    if obj.source is not None and stock:
        _guard_tree_keys(out, obj.source, obj.module, base)
    items: list[Var] = []
    for entry_name, value in entries:
        source = obj.source
        if source is not None:
            parts = [p for p in str(entry_name).split(".") if p]
            if stock and base in _ITERATOR_TABLES:
                *path, leaf = parts or [""]
                for part in path:
                    source = ItemSource(AttrSource(source, "_modules"), part)
                if parts:
                    table = _ITERATOR_TABLES[base]
                    source = ItemSource(AttrSource(source, table), leaf)
            else:
                for part in parts:
                    source = AttrSource(source, part)
        var = out.wrap(value, source)
        items.append(TupleVar((ConstVar(entry_name), var)) if named else var)
    return IteratorVar(IterBox(items))


# The dict each nn.Module iterator reads its leaves from (paths go through ``_modules``).
_ITERATOR_TABLES = {
    "parameters": "_parameters", "buffers": "_buffers", "modules": "_modules",
    "children": "_modules",
}


def _guard_tree_keys(out: Output, source: Source, module: torch.nn.Module, base: str) -> None:
    """DICT_KEYS on the dicts an iterator of ``module`` walks: every ``_modules`` of the tree
    (the root's alone for ``children``) and the ``_parameters``/``_buffers`` it lists."""
    leaf_table = {"parameters": "_parameters", "buffers": "_buffers"}.get(base)
    walk = [("", module)] if base == "children" else list(
        module.named_modules(remove_duplicate=False)
    )
    for path, sub in walk:
        where = source
        for part in [p for p in path.split(".") if p]:
            where = ItemSource(AttrSource(where, "_modules"), part)
        out.request("DICT_KEYS", AttrSource(where, "_modules"), sub._modules)
        if leaf_table is not None:
            out.request("DICT_KEYS", AttrSource(where, leaf_table), getattr(sub, leaf_table))


_HOOK_TABLES = (
    "_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
)
# The global hook dicts nn.Module.__call__ consults before taking its no-hook fast path.
_GLOBAL_HOOK_TABLES = (
    "_global_backward_pre_hooks", "_global_backward_hooks", "_global_forward_hooks",
    "_global_forward_pre_hooks",
)


# The predicates over a module's hook dicts (``m``: the module, or torch.nn.modules.module).
_NO_HOOKS = "not (" + " or ".join(f"m.{table}" for table in _HOOK_TABLES) + ")"
_NO_GLOBAL_HOOKS = "not (" + " or ".join(f"m.{table}" for table in _GLOBAL_HOOK_TABLES) + ")"


def _has_hooks(module: torch.nn.Module) -> bool:
    local = [getattr(module, name, None) for name in _HOOK_TABLES]
    global_hooks = [getattr(module_impl, name, None) for name in _GLOBAL_HOOK_TABLES]
    return any(bool(h) for h in (*local, *global_hooks))


def _guard_no_hooks(out: Output, source: Source | None) -> None:
    """The inlined forward ran no hooks: reuse only while there are still none, on this module
    (its four hook dicts) and globally (torch.nn.modules.module's dicts, once per capture)."""
    _guard_no_global_hooks(out, module_impl)
    if source is not None:
        out.predicate(_NO_HOOKS, f"{source.describe()} has no hooks", m=source)


def _guard_no_global_hooks(out: Output, module_impl: types.ModuleType) -> None:
    """No global nn.Module hooks (torch.nn.modules.module's dicts, read through the module
    object installed as a global of the transformed code)."""
    holder = GlobalSource(out.install(module_impl, "nn_module"))
    out.predicate(_NO_GLOBAL_HOOKS, "no global nn.Module hooks", m=holder)


def _grouped_call(
    out: Output, source: Source | None, module: torch.nn.Module, forward: object
) -> bool:
    """Record a call of the module at ``parent._modules[key]`` for one guards MODULE_CALLS
    per parent (class, no hooks, the forward inlined); False when the source has another
    form."""
    if not (
        isinstance(source, ItemSource)
        and isinstance(source.index, str)
        and isinstance(source.base_source, AttrSource)
        and source.base_source.member == "_modules"
        # The check reads the hook dicts from the instance __dict__: only where they live.
        and all(
            table in module.__dict__ and class_lookup(type(module), table) is MISSING
            for table in _HOOK_TABLES
        )
    ):
        return False
    _guard_no_global_hooks(out, module_impl)
    calls = out.module_calls.setdefault(source.base_source, {})
    calls.setdefault(source.index, (type(module), forward))
    return True


def _hook_tables(module: torch.nn.Module) -> dict[str, dict[Any, Any]]:
    """The hook dicts ``nn.Module._call_impl`` reads for ``module``, by attribute name."""
    return {
        name: getattr(module, name, None) or {}
        for name in (*_HOOK_TABLES, *_FORWARD_HOOK_FLAGS)
    }


# The per-module sets (dicts of hook id -> True) that change how a forward hook is called.
_FORWARD_HOOK_FLAGS = (
    "_forward_pre_hooks_with_kwargs", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
)
_GLOBAL_FORWARD_HOOK_FLAGS = (
    "_global_forward_hooks_with_kwargs", "_global_forward_hooks_always_called",
)


def _check_hooks_inlinable(module: torch.nn.Module) -> None:
    """Raise Unsupported for the hooks the VM leaves to eager: backward hooks (theirs is
    autograd state, not graph code) and ``always_call`` forward hooks."""
    name = type(module).__name__
    local = _hook_tables(module)
    if (
        local["_backward_hooks"] or local["_backward_pre_hooks"]
        or module_impl._global_backward_hooks or module_impl._global_backward_pre_hooks
    ):
        raise Unsupported(f"calling {name} with forward/backward hooks registered")
    if local["_forward_hooks_always_called"] or module_impl._global_forward_hooks_always_called:
        raise Unsupported(f"calling {name} with an always_call forward hook registered")


def _guard_global_hooks(out: Output) -> Source:
    """Guard the global hook dicts as the trace found them: exact keys in order (forward
    hooks, their with_kwargs/always_call sets; the backward ones empty). Returns the source of
    ``torch.nn.modules.module``."""
    holder = GlobalSource(out.install(module_impl, "nn_module"))
    for table in (*_GLOBAL_HOOK_TABLES, *_GLOBAL_FORWARD_HOOK_FLAGS):
        out.request("DICT_KEYS", AttrSource(holder, table), getattr(module_impl, table))
    return holder


def _hook_var(out: Output, table: Source | None, hook_id: object, hook: object) -> Var:
    """A hook function read from its dict, pinned by identity when it has a source."""
    source = ItemSource(table, hook_id) if table is not None else None
    if source is not None:
        out.request("ID_MATCH", source, hook)
    return out.wrap(hook, source)


def _is_none(var: Var) -> bool:
    return isinstance(var, ConstVar) and var.value is None


def _unpack_args(var: Var, what: str) -> list[Var]:
    if isinstance(var, TupleVar):
        return list(var.items)
    if isinstance(var, ListVar):
        return list(var.box.items)
    raise Unsupported(f"{what} returned args of a kind the VM cannot unpack")


def _call_hooked(
    vm: Interpreter, obj: ModuleVar, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    """``module(*args, **kwargs)`` with forward (pre-)hooks, as ``nn.Module._call_impl`` runs
    them: global then local pre-hooks (each may replace the args, or args and kwargs when
    registered with_kwargs), forward, then global then local forward hooks (each may replace
    the output). Every hook dict is guarded by its exact keys and each hook by identity."""
    out = vm.out
    module = obj.module
    holder = _guard_global_hooks(out)
    source = obj.source
    if source is not None:
        for table in (*_HOOK_TABLES, *_FORWARD_HOOK_FLAGS):
            out.request("DICT_KEYS", AttrSource(source, table), getattr(module, table))
    local = _hook_tables(module)

    def table_source(base: Source | None, table: str) -> Source | None:
        return AttrSource(base, table) if base is not None else None

    pre_kwargs = local["_forward_pre_hooks_with_kwargs"]
    fwd_kwargs = {**module_impl._global_forward_hooks_with_kwargs,
                  **local["_forward_hooks_with_kwargs"]}
    args_var: Var = TupleVar(tuple(args))
    kwargs_var: Var = DictVar(DictBox(dict(kwargs)))
    pre_hooks = [
        (table_source(holder, "_global_forward_pre_hooks"), hook_id, hook)
        for hook_id, hook in module_impl._global_forward_pre_hooks.items()
    ] + [
        (table_source(source, "_forward_pre_hooks"), hook_id, hook)
        for hook_id, hook in local["_forward_pre_hooks"].items()
    ]
    for table, hook_id, hook in pre_hooks:
        hook_var = _hook_var(out, table, hook_id, hook)
        if hook_id in pre_kwargs:
            result = vm.call(hook_var, [obj, args_var, kwargs_var], {})
            if _is_none(result):
                continue
            if not (isinstance(result, TupleVar) and len(result.items) == 2):
                raise Unsupported("a forward pre-hook (with_kwargs) returned a non-pair")
            args_var, kwargs_var = result.items
        else:
            result = vm.call(hook_var, [obj, args_var], {})
            if _is_none(result):
                continue
            args_var = result if isinstance(result, TupleVar) else TupleVar((result,))
    call_args = _unpack_args(args_var, "a forward pre-hook")
    if not (
        isinstance(kwargs_var, DictVar) and all(isinstance(k, str) for k in kwargs_var.box.items)
    ):
        raise Unsupported("a forward pre-hook returned kwargs that are not a dict of str keys")
    call_kwargs = dict(kwargs_var.box.items)
    output = _call_forward(vm, obj, call_args, call_kwargs)
    post_hooks = [
        (table_source(holder, "_global_forward_hooks"), hook_id, hook)
        for hook_id, hook in module_impl._global_forward_hooks.items()
    ] + [
        (table_source(source, "_forward_hooks"), hook_id, hook)
        for hook_id, hook in local["_forward_hooks"].items()
    ]
    for table, hook_id, hook in post_hooks:
        hook_var = _hook_var(out, table, hook_id, hook)
        hook_args = (
            [obj, args_var, kwargs_var, output] if hook_id in fwd_kwargs
            else [obj, args_var, output]
        )
        result = vm.call(hook_var, hook_args, {})
        if not _is_none(result):
            output = result
    return output


def _call_forward(
    vm: Interpreter, obj: ModuleVar, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    module = obj.module
    if "forward" in module.__dict__:
        return vm.call(module_attr(vm, obj, "forward"), args, kwargs)
    forward = class_lookup(type(module), "forward")
    if isinstance(forward, staticmethod):  # called as self.forward(...): without the module
        return vm.call(FunctionVar(cast(types.FunctionType, forward.__func__)), args, kwargs)
    return vm.call(BoundMethodVar(obj, FunctionVar(forward)), args, kwargs)


def call_module(vm: Interpreter, obj: ModuleVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """``module(*args)``: inline its forward, and its forward hooks and pre-hooks (local and
    global) around it as ``nn.Module.__call__`` runs them; backward hooks and ``always_call``
    forward hooks are graph breaks."""
    module = obj.module
    if "_initialize_hook" in module.__dict__:
        _initialize_lazy(vm, obj, args, kwargs)
    hooked = _has_hooks(module)
    if hooked:
        _check_hooks_inlinable(module)
        if obj.source is None:  # its hook dicts could not be guarded
            raise Unsupported(f"calling {type(module).__name__} (no source) with hooks registered")
    vm.out.depend(obj)
    # Read without calling a descriptor: a TorchScript module's class holds one that needs an
    # instance (its forward is TorchScript; torch.compile breaks on calling it too).
    forward = class_lookup(type(module), "forward")
    function = forward.__func__ if isinstance(forward, staticmethod) else forward
    if not isinstance(function, types.FunctionType):
        raise Unsupported(
            f"calling {type(module).__name__}: its forward is a {type(forward).__name__}, not a "
            "Python function (a TorchScript module's runs in TorchScript); it runs eagerly"
        )
    own_forward = "forward" in module.__dict__
    if hooked or not _grouped_call(vm.out, obj.source, module, None if own_forward else function):
        if not hooked:
            _guard_no_hooks(vm.out, obj.source)
        if obj.source is not None and not own_forward:
            # forward patched on the instance or class later: recompile
            object_attrs.guard_method_resolution(vm.out, obj.source, module, "forward", forward)
    if hooked:
        return _call_hooked(vm, obj, args, kwargs)
    return _call_forward(vm, obj, args, kwargs)


def _initialize_lazy(
    vm: Interpreter, obj: ModuleVar, args: list[Var], kwargs: dict[str, Var]
) -> None:
    """The first call of a lazy module (``nn.LazyLinear``, a ``LazyModuleMixin`` class): run
    its initialization for real before tracing the call, as torch.compile does, on the fake
    example values (only their shapes and dtypes matter): it materializes the parameters,
    removes its pre-hook and may change the module's class (LazyLinear -> Linear); the call
    is then traced on the initialized module. That change is the one eager's first call makes;
    it stays even when the trace later breaks, and eager's run of the call then finds the
    module initialized."""
    if obj.source is None:
        raise Unsupported(f"initializing lazy module {type(obj.module).__name__} with no source")
    fake_args = tuple(_example(vm, a) for a in args)
    fake_kwargs = {k: _example(vm, v) for k, v in kwargs.items()}
    try:
        obj.module._infer_parameters(obj.module, fake_args, fake_kwargs)
    except Exception as exc:
        raise Unsupported(
            f"{type(exc).__name__} raised initializing lazy module "
            f"{type(obj.module).__name__}: {exc}"
        ) from exc


def _example(vm: Interpreter, var: Var) -> Any:
    """What a lazy module's initialization sees for argument ``var``: a tensor's fake value
    (static shapes only: a symbolic size would become the parameter's size), a constant's
    value, a tuple (named or not), list or dict of those."""
    if isinstance(var, TensorVar):
        if not all(isinstance(size, int) for size in var.example.shape):
            raise Unsupported("initializing a lazy module on a tensor of dynamic shape")
        vm.out.depend(var)
        return var.example
    if isinstance(var, TupleVar) and var.named_type is not None:
        return var.named_type(*(_example(vm, v) for v in ops.items(vm.out, var)))
    if isinstance(var, (TupleVar, ListVar)):
        values = [_example(vm, v) for v in ops.items(vm.out, var)]
        return tuple(values) if isinstance(var, TupleVar) else values
    if isinstance(var, DictVar):
        vm.out.depend(var)
        return {k: _example(vm, v) for k, v in var.box.items.items()}
    return ops.const_value(vm.out, var)


def call_sequential_slice(
    vm: Interpreter, seq: SequentialSliceVar, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    """Calling ``seq[a:b]``: the new Sequential has no hooks of its own, so its call is its
    ``forward`` (each submodule on the previous one's output) unless a global module hook
    would see it (guarded as the trace found them)."""
    if kwargs or len(args) != 1:
        raise Unsupported("calling a Sequential slice with other than one positional argument")

    if any(getattr(module_impl, name, None) for name in _GLOBAL_HOOK_TABLES):
        raise Unsupported("calling a Sequential slice while global module hooks are registered")
    _guard_no_hooks(vm.out, None)
    value = args[0]
    for module in seq.items:
        value = vm.call(module, [value], {})
    return value



class _ModuleTracker(type_trackers.TypeTracker):
    """``len(m)`` and ``bool(m)`` of a module whose class defines its own Python ``__len__``
    or ``__bool__``: traced as calls, as Python runs them. The stock containers'
    (ModuleList, Sequential, ModuleDict) stay with ``module_tables.module_len``'s guarded
    count; None there, and for a module without such a method."""

    def length(self, vm: Interpreter, obj: Var) -> Var | None:
        assert isinstance(obj, ModuleVar)
        if has_stock_len(type(obj.module)):
            return None
        return _own_dunder(vm, obj, "__len__")

    def truth(self, vm: Interpreter, obj: Var) -> Var | None:
        assert isinstance(obj, ModuleVar)
        if class_lookup(type(obj.module), "__bool__") is MISSING:
            size = self.length(vm, obj)
            return None if size is None else ops.compare(vm.out, "!=", size, ConstVar(0))
        return _own_dunder(vm, obj, "__bool__")


def _own_dunder(vm: Interpreter, obj: ModuleVar, name: str) -> Var | None:
    """``type(m).name(m)`` traced, for a Python function (guarded where the module has a
    source); None when the class has no such Python method."""
    method = class_lookup(type(obj.module), name)
    if not isinstance(method, types.FunctionType):
        return None
    if obj.source is not None:
        object_attrs.guard_method_resolution(vm.out, obj.source, obj.module, name, method)
    return vm.call(BoundMethodVar(obj, FunctionVar(method)), [], {})


type_trackers.VAR_TRACKERS[ModuleVar] = _ModuleTracker()
