"""Calls into torch: graph nodes for ops, constants for metadata queries, grad-mode contexts."""

from __future__ import annotations

import operator
import types
import weakref
from typing import TYPE_CHECKING, Any

import attrs
import torch
from torch._library.custom_ops import CustomOpDef
from torch.fx.node import map_aggregate
from torch.utils import _pytree as pytree

from symbolic_vm import operations as ops
from symbolic_vm import tensor_attrs
from symbolic_vm.errors import Unsupported
from symbolic_vm.guard_api import CallSource, UnsupportedGuardValue
from symbolic_vm.output import Output
from symbolic_vm.registries import NONSTRICT_TRACE
from symbolic_vm.side_effects import AttrWrite
from symbolic_vm.values import (
    AutocastExitVar,
    AutocastVar,
    ConstVar,
    ContextExitVar,
    DictBox,
    DictVar,
    GradModeVar,
    ListBox,
    ListVar,
    MethodVar,
    ObjectVar,
    SymVar,
    TensorVar,
    TupleVar,
    Var,
)

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter

# Functions whose answer is a Python value known at trace time (covered by guards).
_METADATA_FUNCTIONS: dict[Any, str] = {
    torch.is_tensor: "is_tensor",
    torch.is_floating_point: "is_floating_point",
    torch.is_complex: "is_complex",
    torch.numel: "numel",
    torch.is_grad_enabled: "is_grad_enabled",
    torch.get_default_dtype: "get_default_dtype",
    torch.is_autocast_enabled: "is_autocast_enabled",
    torch.overrides.has_torch_function: "has_torch_function",
    torch.overrides.has_torch_function_unary: "has_torch_function_unary",
    torch.overrides.has_torch_function_variadic: "has_torch_function_variadic",
    torch.is_inference_mode_enabled: "is_inference_mode_enabled",
}
# Questions whose answer inside a compiled region is fixed. The functions are lookup keys only
# (user code that calls them is folded to the answer); Strata never calls them.
_FIXED_ANSWERS: dict[Any, object] = {
    torch._jit_internal.is_scripting: False,
    torch._C._get_tracing_state: None,
    torch.compiler.is_compiling: True,
    torch.compiler.is_dynamo_compiling: False,
}
# Queries about active torch function/dispatch modes: answered for real, outside the tracer's
# own fake mode. The GLOBAL_STATE guard pins the number of active modes, so the answer holds.
MODE_QUERIES: tuple[Any, ...] = tuple(
    fn
    for fn in (
        getattr(torch.utils._python_dispatch, "_get_current_dispatch_mode", None),
        getattr(torch.utils._python_dispatch, "_get_current_dispatch_mode_stack", None),
        getattr(torch._C, "_len_torch_dispatch_stack", None),
        getattr(torch._C, "_is_torch_function_mode_enabled", None),
        getattr(torch._C, "_len_torch_function_stack", None),
        getattr(torch.overrides, "_get_current_function_mode_stack", None),
    )
    if fn is not None
)
# torch's associative_scan: the package re-exports the function over its module of the same
# name. The module's Python functions are traced (not graph nodes): higher_order lets only the
# generic mode, Python over torch.vmap, reach them.
_TRACED_TORCH_MODULES = ("torch._higher_order_ops.associative_scan",)
ASSOCIATIVE_SCAN: Any = getattr(getattr(torch, "_higher_order_ops", None), "associative_scan", None)
if isinstance(ASSOCIATIVE_SCAN, types.ModuleType):
    ASSOCIATIVE_SCAN = getattr(ASSOCIATIVE_SCAN, "associative_scan", None)
_CONSTANT_CONSTRUCTORS: tuple[Any, ...] = (torch.Size, torch.device, torch.finfo, torch.iinfo)
_UNSUPPORTED: dict[Any, str] = {
    torch.manual_seed: "torch.manual_seed() changes the global RNG state",
    torch.seed: "torch.seed() changes the global RNG state",
    torch.random.seed: "torch.random.seed() changes the global RNG state",
    torch.set_default_dtype: "torch.set_default_dtype() changes global state",
}


# torch functions with effects outside the program (files, the network, process-wide
# settings): never run on fake values while tracing, nor put in a graph a backend may drop or
# reorder. A call of one breaks the graph before it runs (under fullgraph=True it raises
# without having run), and runs eagerly at the break.
_EFFECT_MODULES = ("torch.hub", "torch.package", "torch.distributed.checkpoint")
# By name where the module also holds queries models call while tracing (jit's is_tracing,
# onnx's is_in_onnx_export, torch.cuda.memory_allocated): those stay traced.
_EFFECT_FUNCTIONS: tuple[Any, ...] = tuple(
    fn
    for fn in (
        getattr(owner, name, None)
        for owner, names in (
            (torch, ("save", "load")),
            (torch.serialization, ("save", "load")),
            (getattr(torch, "jit"), ("save", "load", "trace", "trace_module", "script", "freeze")),  # noqa: B009
            (torch.onnx, ("export", "dynamo_export")),
            (torch.cuda.memory, ("_dump_snapshot", "_record_memory_history")),
        )
        for name in names
    )
    if fn is not None
)
_GLOBAL_SETTERS: tuple[Any, ...] = tuple(
    fn
    for fn in (
        getattr(torch, name, None)
        for name in (
            "set_num_threads", "set_num_interop_threads", "set_printoptions",
            "use_deterministic_algorithms", "set_deterministic_debug_mode",
            "set_float32_matmul_precision", "set_warn_always", "set_default_device",
            "set_default_tensor_type", "set_flush_denormal", "set_anomaly_enabled",
            "set_rng_state", "set_autocast_enabled",
        )
    )
    if fn is not None
)


# torch._C setters the VM models itself (grad mode is a graph node and a tracer state).
_TRACED_SETTERS: tuple[Any, ...] = (torch._C._set_grad_enabled,)


def effect_reason(value: object) -> str | None:
    """Why calling torch's ``value`` must not be traced (its effects), or None."""
    if value in _GLOBAL_SETTERS:
        return f"{_name(value)}() changes process-wide state"
    if (
        isinstance(value, types.BuiltinFunctionType)
        and _name(value).startswith(("_set_", "set_"))
        and getattr(getattr(value, "__self__", None), "__name__", "") == "torch._C"
        and value not in _TRACED_SETTERS
    ):
        return f"torch._C.{_name(value)}() changes process-wide state"
    module = getattr(value, "__module__", None) or ""
    if value in _EFFECT_FUNCTIONS or (
        isinstance(value, types.FunctionType)
        and module.startswith(_EFFECT_MODULES)
        and not _is_pure_query(value)
    ):
        return f"{module}.{_name(value)}() reads or writes outside the program (files, devices)"
    return None


def _is_pure_query(fn: types.FunctionType) -> bool:
    # The questions of those modules (jit's is_tracing/is_scripting, onnx's
    # is_in_onnx_export) change nothing: models ask them on every forward (transformers'
    # attention asks jit's is_tracing() in each layer), so they trace.
    return fn.__name__.startswith(("is_", "_is_"))


def is_torch_function(value: object) -> bool:
    """True for a callable from the torch namespace that should become one graph node."""
    if isinstance(value, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return True
    if isinstance(value, types.BuiltinFunctionType | types.BuiltinMethodType):
        module = getattr(value, "__module__", None) or ""
        self_obj = getattr(value, "__self__", None)
        return module.startswith("torch") or (
            self_obj is not None and type(self_obj).__module__.startswith("torch")
        ) or (isinstance(self_obj, types.ModuleType) and self_obj.__name__.startswith("torch"))
    if isinstance(value, (types.MethodDescriptorType, types.WrapperDescriptorType)):
        return getattr(value, "__objclass__", None) in (torch.Tensor, torch._C.TensorBase)
    if isinstance(value, types.FunctionType):
        module = value.__module__ or ""
        if module in _TRACED_TORCH_MODULES:
            return False
        # Python functions of torch that are not ops: module code (traced), utilities,
        # grad-mode helpers and parametrizations (a parametrized weight is a property whose
        # getter calls the parametrization modules: weight_norm in wav2vec2 and HuBERT);
        # torch.testing's helpers (its TestCase's assert methods) are Python over Python values;
        # torch.optim's step code is traced (run on fake values, its lazy state init wrote
        # FakeTensors into the real optimizer's state)
        return module.startswith("torch.") and not module.startswith(
            ("torch.nn.modules", "torch.utils", "torch.autograd.grad_mode", "torch.optim",
             "torch.nn.utils.parametrize", "torch.nn.utils.parametrizations", "torch.testing")
        )
    return False


def call_torch(
    vm: Interpreter, fn: ObjectVar, args: list[Var], kwargs: dict[str, Var]
) -> Var | None:
    """Handle a call to a torch function or class; None when ``fn`` is not torch's."""
    out = vm.out
    value = fn.value
    if type(value).__hash__ is None:
        # a user object whose class defines __eq__ and not __hash__ (torch's callables hash):
        # the table lookups below would raise TypeError inside the VM
        return None
    if value is torch.no_grad:
        _no_arguments(args, kwargs, "torch.no_grad")
        return GradModeVar(False)
    if value is torch.enable_grad:
        _no_arguments(args, kwargs, "torch.enable_grad")
        return GradModeVar(True)
    if value is torch.set_grad_enabled:
        if len(args) + len(kwargs) != 1 or (kwargs and "mode" not in kwargs):
            raise Unsupported("torch.set_grad_enabled() takes exactly one argument, mode")
        enabled = bool(ops.const_value(out, args[0] if args else kwargs["mode"]))
        previous = torch.is_grad_enabled()
        set_grad_mode(out, enabled)
        # Already in effect: as a context manager, its exit restores the previous mode.
        return GradModeVar(previous, applied=True)
    if value in _AUTOCAST_CLASSES:
        return _autocast(out, value, args, kwargs)
    if value is torch.inference_mode:
        return _inference_mode(out, args, kwargs)
    if isinstance(value, CustomOpDef):
        # torch.library.custom_op: one opaque node (its OpOverload), example values from the
        # registered fake kernel; without one the fake run fails and the graph breaks there.
        out.depend(fn)
        return ops.graph_call(out, value._opoverload, args, kwargs)
    if value in _UNSUPPORTED:
        raise Unsupported(_UNSUPPORTED[value])
    effects = effect_reason(value)
    if effects is not None:
        raise Unsupported(f"{effects}: it runs eagerly, at a graph break")
    if value in MODE_QUERIES:
        if args or kwargs:
            raise Unsupported(f"{_name(value)} called with arguments")
        answer = value()
        if answer in (None, [], 0, False, True) or isinstance(answer, int):
            return out.wrap(answer, None)
        raise Unsupported(f"{_name(value)}() inside a compiled function with modes active")
    if value in _FIXED_ANSWERS:
        return ConstVar(_FIXED_ANSWERS[value])
    if value in _METADATA_FUNCTIONS:
        py_args = [_meta_arg(out, a) for a in args]
        return ConstVar(value(*py_args))
    if value in _CONSTANT_CONSTRUCTORS:
        py_args = [ops.const_value(out, a) for a in args]
        py_kwargs = {k: ops.const_value(out, v) for k, v in kwargs.items()}
        return out.wrap(value(*py_args, **py_kwargs), None)
    if not is_torch_function(value):
        return None
    if (
        isinstance(value, types.MethodDescriptorType) and args
        and isinstance(args[0], TensorVar) and tensor_attrs.answers_from_metadata(value.__name__)
    ):
        # torch.Tensor.storage_offset(x) is x.storage_offset(): folded and guarded the same way.
        return vm.call(MethodVar(args[0], value.__name__), args[1:], kwargs)
    out.depend(fn)
    if "out" in kwargs:
        return _call_with_out(out, value, args, kwargs)
    if value is torch.tensor and len(args) == 1 and holds_symbol(out, args[0]):
        return tensor_of_symbols(out, args[0], kwargs)
    result = ops.graph_call(out, value, args, kwargs)
    if isinstance(result, ConstVar) and result.value is not None and not any(
        _holds_graph_value(a) for a in (*args, *kwargs.values())
    ):
        _guard_global_query(out, value, args, kwargs, result.value)
    return result


def _holds_graph_value(var: Var) -> bool:
    if isinstance(var, TensorVar | SymVar):
        return True
    if isinstance(var, TupleVar):
        return any(_holds_graph_value(v) for v in var.items)
    if isinstance(var, ListVar):
        return any(_holds_graph_value(v) for v in var.box.items)
    if isinstance(var, DictVar):
        return any(_holds_graph_value(v) for v in var.box.items.values())
    return False


def _guard_global_query(
    out: Output, fn: Any, args: list[Var], kwargs: dict[str, Var], answer: object
) -> None:
    """A torch function answered a Python value from no tensor: it read global state
    (``torch.autograd._profiler_enabled()``, ``torch.get_num_threads()``,
    ``torch.cuda.is_available()``, ...) that GLOBAL_STATE may not cover. Guard the answer by
    asking again on every call (functions with side effects that answer a value are refused in
    _UNSUPPORTED); one that cannot be asked with these arguments is not folded."""
    py_args = tuple(ops.const_value(out, a) for a in args)
    py_kwargs = tuple((k, ops.const_value(out, v)) for k, v in kwargs.items())
    try:
        source = CallSource(fn, py_args, py_kwargs)
    except UnsupportedGuardValue as exc:
        raise Unsupported(f"{_name(fn)}() answers from global state; {exc}") from exc
    out.request("CONSTANT_MATCH", source, answer)


def holds_symbol(out: Output, data: Var) -> bool:
    if isinstance(data, SymVar):
        return True
    if isinstance(data, TupleVar | ListVar):
        return any(isinstance(v, SymVar) for v in ops.items(out, data))
    return False


def tensor_of_symbols(out: Output, data: Var, kwargs: dict[str, Var]) -> Var:
    """``torch.tensor(n)`` / ``torch.tensor([n, 2])`` with symbolic numbers in the data.

    On fakes, ``torch.tensor`` reads each number's value, which would specialise the symbol
    (a recompile per value); built from ``scalar_tensor`` nodes instead, the number stays an
    input of the graph. The dtype is the one ``torch.tensor`` infers from the Python types
    (any float: the default float dtype, which the global-state guard pins; else any int:
    int64; else bool) unless ``dtype=`` says otherwise.
    """
    flat = list(ops.items(out, data)) if isinstance(data, TupleVar | ListVar) else [data]
    if any(not isinstance(v, SymVar | ConstVar) for v in flat) or any(
        isinstance(v, ConstVar) and type(v.value) not in (int, float, bool) for v in flat
    ):
        raise Unsupported("torch.tensor() of a nested or non-number sequence with symbolic sizes")
    allowed = {"dtype", "device", "requires_grad"}
    if set(kwargs) - allowed:
        raise Unsupported(f"torch.tensor() with {sorted(set(kwargs) - allowed)} and symbolic data")
    kinds = {_number_kind(v) for v in flat}
    dtype: Var = kwargs.get("dtype", ConstVar(None))
    if isinstance(dtype, ConstVar) and dtype.value is None:
        inferred = (
            torch.get_default_dtype()
            if float in kinds
            else torch.int64 if int in kinds else torch.bool
        )
        dtype = ConstVar(inferred)
    options = {"dtype": dtype, "device": kwargs.get("device", ConstVar(None))}
    scalars = [ops.graph_call(out, torch.scalar_tensor, [v], options) for v in flat]
    result = (
        ops.graph_call(out, torch.stack, [ListVar(ListBox(scalars))], {})
        if isinstance(data, TupleVar | ListVar)
        else scalars[0]
    )
    grad = kwargs.get("requires_grad")
    if grad is not None and ops.const_value(out, grad):
        result = ops.graph_method(out, "requires_grad_", [result], {})
    return result


def _number_kind(v: Var) -> type:
    if isinstance(v, ConstVar):
        return type(v.value)
    example = v.example  # type: ignore[attr-defined]
    if isinstance(example, torch.SymBool):
        return bool
    return float if isinstance(example, torch.SymFloat) else int


def _call_with_out(out: Output, fn: Any, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """``fn(..., out=t)``: the out tensors are written as eager writes them, and the call
    returns them (``torch.add(a, b, out=c) is c``).

    Where eager keeps each out tensor's size, the call goes into the graph with its ``out=``
    (an in-place write, which every backend replays). Where eager resizes one (an empty out),
    the graph computes the plain op instead, later uses of the tensor in the graph read that
    result (GraphBuilder.redirect), and a tensor from the frame gets it as its ``.data`` after
    the graph: backends that functionalize cannot resize their inputs.
    """
    target = kwargs["out"]
    plain_kwargs = {k: v for k, v in kwargs.items() if k != "out"}
    if isinstance(target, ConstVar) and target.value is None:
        return ops.graph_call(out, fn, args, plain_kwargs)
    targets = list(target.items) if isinstance(target, TupleVar) else [target]
    tensors = [t for t in targets if isinstance(t, TensorVar)]
    if len(tensors) != len(targets):
        raise Unsupported(f"{_name(fn)}(out=...) with out= that is not a tensor or tuple of them")
    tuple_out = isinstance(target, TupleVar)
    shapes, named = _probe_out_call(out, fn, args, plain_kwargs, tensors, tuple_out)
    if all(shape == tuple(t.example.shape) for shape, t in zip(shapes, tensors, strict=True)):
        result = ops.graph_call(out, fn, args, kwargs)
    else:
        result = ops.graph_call(out, fn, args, plain_kwargs)
        results = list(result.items) if isinstance(result, TupleVar) else [result]
        for tensor, value, shape in zip(tensors, results, shapes, strict=True):
            _write_out(out, tensor, value, shape)
    if not isinstance(target, TupleVar):
        return target
    fields = tuple(str(f) for f in getattr(named, "__match_args__", ()))
    return TupleVar(tuple(targets), fields=fields, named_type=named)


def _probe_out_call(  # noqa: PLR0917 - the parts of one call
    out: Output,
    fn: Any,
    args: list[Var],
    kwargs: dict[str, Var],
    targets: list[TensorVar],
    tuple_out: bool,
) -> tuple[list[tuple[Any, ...]], type | None]:
    """Run the out= call on fakes with fresh out tensors like ``targets``: raises Unsupported
    where eager raises (dtype, autograd), else the sizes eager leaves the out tensors with and
    the named-tuple class an out= call returns (``torch.return_types.max_out``)."""
    def example(value: Any) -> Any:
        return value.meta["example_value"] if isinstance(value, torch.fx.Node) else value

    fake_args = map_aggregate(tuple(ops.graph_arg(out, a) for a in args), example)
    fake_kwargs = map_aggregate({k: ops.graph_arg(out, v) for k, v in kwargs.items()}, example)
    try:
        with out.builder.fake_mode:
            probes = [
                torch.empty(
                    t.example.shape, dtype=t.example.dtype, device=t.example.device,
                    requires_grad=t.example.requires_grad,
                )
                for t in targets
            ]
            result = fn(*fake_args, **fake_kwargs, out=tuple(probes) if tuple_out else probes[0])
    except Exception as exc:
        raise Unsupported(f"{type(exc).__name__} raised by {_name(fn)}(out=...): {exc}") from exc
    named = type(result) if isinstance(result, tuple) and type(result) is not tuple else None
    return [tuple(p.shape) for p in probes], named


def _write_out(out: Output, tensor: TensorVar, value: Var, shape: tuple[Any, ...]) -> None:
    """Make ``tensor`` hold ``value`` (the plain op's result) as the out= call would have."""
    if not isinstance(value, TensorVar):
        raise Unsupported("an out= call whose result is not a tensor")
    if value.example.dtype != tensor.example.dtype:
        value = ops.graph_method(out, "to", [value, ConstVar(tensor.example.dtype)], {})
    assert isinstance(value, TensorVar)
    if shape == tuple(tensor.example.shape):
        ops.graph_method(out, "copy_", [tensor, value], {})
        return
    out.depend(tensor)  # its size before the call is assumed: TENSOR_MATCH
    with out.builder.fake_mode:
        tensor.example.resize_(shape)  # later metadata reads see the new size
    out.builder.redirect(tensor.node, value.node)
    if tensor.node.op == "placeholder":
        out.side_effects.append(AttrWrite(tensor, "data", value))


# The deprecated per-device spellings: their device and default dtype (their parameters are
# enabled, dtype, cache_enabled, in that order, with cache_enabled=True by default).
_DEVICE_AUTOCASTS: dict[Any, tuple[str, torch.dtype]] = {
    torch.cpu.amp.autocast_mode.autocast: ("cpu", torch.bfloat16),
    torch.cuda.amp.autocast_mode.autocast: ("cuda", torch.float16),
}
_AUTOCAST_CLASSES: tuple[Any, ...] = (torch.autocast, torch.amp.autocast, *_DEVICE_AUTOCASTS)


def _autocast(out: Output, cls: Any, args: list[Var], kwargs: dict[str, Var]) -> Var:
    params: tuple[str, ...] = ("device_type", "dtype", "enabled", "cache_enabled")
    values: dict[str, Any] = {"dtype": None, "enabled": True, "cache_enabled": None}
    per_device = _DEVICE_AUTOCASTS.get(cls)
    if per_device is not None:
        params = ("enabled", "dtype", "cache_enabled")
        values = {"device_type": per_device[0], "dtype": per_device[1], "enabled": True,
                  "cache_enabled": True}
    for name, var in zip(params, args, strict=False):
        values[name] = ops.const_value(out, var)
    for name, var in kwargs.items():
        if name not in params:
            raise Unsupported(f"torch.autocast(..., {name}=...)")
        values[name] = ops.const_value(out, var)
    if "device_type" not in values:
        raise Unsupported("torch.autocast() without a device_type")
    device_type = values["device_type"]
    dtype = values["dtype"] or torch.get_autocast_dtype(device_type)
    cache = values["cache_enabled"]
    cache = torch.is_autocast_cache_enabled() if cache is None else cache
    return AutocastVar((device_type, dtype, bool(values["enabled"]), bool(cache)))


def enter_autocast(out: Output, mode: AutocastVar) -> Var:
    """``with torch.autocast(...)``: enter/exit nodes in the graph, entered in the tracer too."""
    node = out.builder.call_function(torch.amp.autocast_mode._enter_autocast, mode.args)
    out.cleanups.append(node.meta["example_value"])
    return AutocastExitVar(node)


@attrs.frozen(eq=False)
class InferenceModeVar(Var):
    """``torch.inference_mode(mode)`` as a context manager (entered like autocast: enter/exit
    nodes in the graph, and in the tracer, so fake values are inference tensors too)."""

    mode: bool


def _inference_mode(out: Output, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if len(args) > 1 or set(kwargs) - {"mode"} or (args and kwargs):
        raise Unsupported("torch.inference_mode() with arguments other than mode")
    given = args[0] if args else kwargs.get("mode")
    return InferenceModeVar(True if given is None else bool(ops.const_value(out, given)))


def enter_inference_mode(out: Output, mode: InferenceModeVar) -> Var:
    """``with torch.inference_mode(mode):`` -- its exit is an AutocastExitVar on the enter node."""
    # Entered in the tracer outside fake propagation: the InferenceMode guard restores the
    # dispatch TLS it saw on entry, which must not be fake mode's.
    context = torch.autograd.grad_mode._enter_inference_mode(mode.mode)  # type: ignore[no-untyped-call]
    out.cleanups.append(context)  # left like autocast: ``__exit__``
    node = out.builder.graph.call_function(
        torch.autograd.grad_mode._enter_inference_mode, (mode.mode,)
    )
    node.meta["example_value"] = context
    return AutocastExitVar(node)


def exit_autocast(out: Output, exit_var: AutocastExitVar) -> None:
    """Leave the autocast (or inference-mode) region entered by ``exit_var.enter_node``."""
    if exit_var.enter_node.target is torch.autograd.grad_mode._enter_inference_mode:
        context = exit_var.enter_node.meta["example_value"]
        node = out.builder.graph.call_function(
            torch.autograd.grad_mode._exit_inference_mode, (exit_var.enter_node,)
        )
        node.meta["example_value"] = None
        if context in out.cleanups:
            out.cleanups.remove(context)
            torch.autograd.grad_mode._exit_inference_mode(context)  # type: ignore[no-untyped-call]
        return
    out.builder.call_function(torch.amp.autocast_mode._exit_autocast, (exit_var.enter_node,))
    mode = exit_var.enter_node.meta["example_value"]
    if mode in out.cleanups:
        out.cleanups.remove(mode)


def _meta_arg(out: Output, var: Var) -> Any:
    if isinstance(var, TensorVar):
        out.depend(var)
        return var.example
    if isinstance(var, TupleVar):
        return tuple(_meta_arg(out, v) for v in var.items)
    return ops.const_value(out, var)


def _no_arguments(args: list[Var], kwargs: dict[str, Var], what: str) -> None:
    if args or kwargs:
        raise Unsupported(f"{what} called with arguments")


def _name(value: object) -> str:
    return str(getattr(value, "__name__", repr(value)))


def set_grad_mode(out: Output, enabled: bool) -> None:
    """Switch grad mode in the graph (and in the tracer, so fake values agree)."""
    if torch.is_grad_enabled() == enabled:
        return
    out.builder.call_function(torch._C._set_grad_enabled, (enabled,))


def enter_grad_mode(out: Output, mode: GradModeVar) -> Var:
    """``with torch.no_grad():`` -- returns the ``__exit__`` callable BEFORE_WITH keeps."""
    if mode.applied:
        return ContextExitVar(mode.enabled)
    previous = torch.is_grad_enabled()
    set_grad_mode(out, mode.enabled)
    return ContextExitVar(previous, manager=mode.enabled)


_APPLY_WRAPPERS: weakref.WeakKeyDictionary[type, Any] = weakref.WeakKeyDictionary()


def autograd_function_apply(cls: type) -> Any:
    """A graph target calling ``cls.apply``: a plain function, so fx's generated code names it
    by itself (``Square.apply`` would be printed as an attribute of torch.autograd.function)."""
    known = _APPLY_WRAPPERS.get(cls)
    if known is None:

        def apply(*args: Any, **kwargs: Any) -> Any:
            return cls.apply(*args, **kwargs)  # type: ignore[attr-defined]

        apply.__name__ = apply.__qualname__ = f"{cls.__name__}_apply"
        _APPLY_WRAPPERS[cls] = known = apply
    return known


def opaque_call(
    out: Output, fn: Any, args: list[Var], kwargs: dict[str, Var], *, nonstrict: bool = False
) -> Var:
    """allow_in_graph / nonstrict_trace: the call becomes one node, run on fakes for its value.

    A nonstrict_trace function may return any pytree of tensors and constants (as with
    torch.compile): its node then returns the flat leaves and the VM rebuilds the dicts, lists
    and tuples around them. A plain tensor or tuple/list result keeps ``fn`` itself as the
    node's target. Either way ``fn`` runs once on fakes.
    """
    if not nonstrict and fn not in NONSTRICT_TRACE:
        return ops.graph_call(out, fn, args, kwargs)
    flat, specs = _flat_outputs(fn)
    leaves = ops.graph_call(out, flat, args, kwargs)
    spec = specs[-1]
    if not isinstance(leaves, TupleVar):
        raise Unsupported(f"nonstrict_trace function {_name(fn)}: its leaves are no tuple")
    if _plain_structure(spec):
        # Re-target the node to ``fn`` (same arguments, the unflattened fake result).
        source = next(n for n in reversed(out.builder.graph.nodes) if n.target is flat)
        direct = out.builder.graph.call_function(fn, source.args, source.kwargs)
        direct.meta["example_value"] = pytree.tree_unflatten(
            [n.meta["example_value"] for n in _getitem_nodes(source)], spec
        )
        for node in _getitem_nodes(source):
            out.builder.graph.erase_node(node)
        out.builder.graph.erase_node(source)
        return ops.wrap_example(out, direct)
    return _rebuild(pytree.tree_unflatten(list(leaves.items), spec))


_FLAT_WRAPPERS: weakref.WeakKeyDictionary[Any, tuple[Any, list[Any]]] = (
    weakref.WeakKeyDictionary()
)


def _flat_outputs(fn: Any) -> tuple[Any, list[Any]]:
    """A function calling ``fn`` and returning its result's pytree leaves as a tuple, and the
    list its last call appended the result's structure (TreeSpec) to."""
    known = _FLAT_WRAPPERS.get(fn)
    if known is None:
        specs: list[Any] = []

        def flat(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
            leaves, spec = pytree.tree_flatten(fn(*args, **kwargs))
            specs[:] = [spec]
            return tuple(leaves)

        flat.__name__ = flat.__qualname__ = f"{_name(fn)}_flat"
        _FLAT_WRAPPERS[fn] = known = (flat, specs)
    return known


def _plain_structure(spec: Any) -> bool:
    """A single leaf, or a tuple/list of leaves: what a graph node's result can be as it is."""
    if spec.is_leaf():
        return True
    return spec.type in (tuple, list) and all(child.is_leaf() for child in spec.children_specs)


def _getitem_nodes(source: Any) -> list[Any]:
    """The getitem nodes reading ``source``'s leaves, in leaf order."""
    items = [user for user in source.users if user.target is operator.getitem]
    return sorted(items, key=lambda node: node.args[1])


def _rebuild(value: Any) -> Var:
    """Tracked values for a result rebuilt around its leaf vars."""
    if isinstance(value, Var):
        return value
    if value is None:
        return ConstVar(None)
    if type(value) is dict:
        return DictVar(DictBox({k: _rebuild(v) for k, v in value.items()}))
    if type(value) is list:
        return ListVar(ListBox([_rebuild(v) for v in value]))
    if type(value) is tuple:
        return TupleVar(tuple(_rebuild(v) for v in value))
    raise Unsupported(f"a nonstrict_trace result holding {type(value).__name__}")


__all__ = ["call_torch", "enter_grad_mode", "is_torch_function", "set_grad_mode"]
