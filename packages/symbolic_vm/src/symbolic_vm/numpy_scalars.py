"""NumPy on Python and NumPy scalars: folded while tracing, as torch.compile folds them.

Models compute scale factors with NumPy (transformers' CTRL: ``x *= np.sqrt(d_model)``). A
ufunc (``np.sqrt``, ``np.exp``, ...) or a scalar type (``np.float32(1.5)``) called on
constants is pure, so it is called while tracing and its result is a constant; a NumPy scalar
passed to a torch operation enters the graph as the Python number it holds
(``numpy_values.numpy_scalar_value``, in ``operations.graph_arg``): fx would otherwise print it as
``np.float64(...)`` in the graph's code, a name that code does not define. Calls on arrays or
tensors are left to the VM's other rules (a break).

Importing this module registers the calls (symbolic_vm.calls imports it); without NumPy it
registers nothing. torch imports NumPy when it is installed, so it is read from sys.modules.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import torch  # noqa: F401  (imports NumPy first when it is installed)

from symbolic_vm import attributes
from symbolic_vm import operations as ops
from symbolic_vm.builtin_table import implements
from symbolic_vm.errors import Unsupported, throw
from symbolic_vm.numpy_values import depend_numpy_scalar, numpy_scalar_value
from symbolic_vm.stdlib.polyfill import calls_of
from symbolic_vm.values import ConstVar, ObjectVar, Var

if TYPE_CHECKING:
    from symbolic_vm.interpreter import Interpreter

__all__: list[str] = []

_NP: Any = sys.modules.get("numpy")


def _constant(vm: Interpreter, var: Var) -> Any:
    """``var``'s value if it is a Python or NumPy scalar constant, else raise Unsupported."""
    if isinstance(var, ObjectVar) and numpy_scalar_value(var.value) is not None:
        depend_numpy_scalar(vm.out, var)
        return var.value
    if isinstance(var, ConstVar) and isinstance(var.value, (bool, int, float, complex, str)):
        vm.out.depend(var)
        return var.value
    raise Unsupported(f"a NumPy function of {ops.describe(var)} (only scalar constants fold)")


def _fold(vm: Interpreter, fn: object, args: list[Var], kwargs: dict[str, Var]) -> Var:
    py_args = [_constant(vm, a) for a in args]
    py_kwargs = {k: _constant(vm, v) for k, v in kwargs.items()}
    try:
        value = fn(*py_args, **py_kwargs)  # type: ignore[operator]
    except (TypeError, ValueError, OverflowError, ZeroDivisionError, ArithmeticError) as exc:
        raise throw(type(exc), *exc.args) from exc
    if numpy_scalar_value(value) is None and not isinstance(value, (bool, int, float, tuple)):
        raise Unsupported(f"a NumPy call that returned {type(value).__name__}")
    return vm.out.wrap(value, None)


if _NP is not None:

    @calls_of(_NP.ufunc)
    def _call_ufunc(
        vm: Interpreter, fn: ObjectVar, args: list[Var], kwargs: dict[str, Var]
    ) -> Var | None:
        vm.out.depend(fn)
        return _fold(vm, fn.value, args, kwargs)

    def _scalar_maker(kind: type) -> None:
        @implements(kind)
        def make(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
            if len(args) != 1 or kwargs:
                raise Unsupported(f"numpy.{kind.__name__} called with other than one argument")
            return _fold(vm, kind, args, {})

    # The concrete scalar types (float32, int64, bool_, ...): constructing one is pure.
    for _kind in {t for t in _NP.sctypeDict.values() if issubclass(t, _NP.number | _NP.bool_)}:
        _scalar_maker(_kind)

    def _dtype_constant(vm: Interpreter, var: Var) -> Any:
        """A dtype spelled as a constant: a NumPy scalar type, an ``np.dtype``, a string or a
        NumPy scalar; anything else is Unsupported."""
        if isinstance(var, ObjectVar) and (
            isinstance(var.value, _NP.dtype)
            or (isinstance(var.value, type) and issubclass(var.value, _NP.generic))
        ):
            vm.out.depend(var)
            return var.value
        if isinstance(var, ObjectVar) and isinstance(var.value, (_NP.iinfo, _NP.finfo)):
            # np.iinfo(info) takes another info's dtype: read (and guarded) at its source
            return _dtype_constant(vm, attributes.getattr_var(vm, var, "dtype"))
        return _constant(vm, var)

    def _type_info(info: type) -> None:
        @implements(info)
        def make(vm: Interpreter, args: list[Var], kwargs: dict[str, Var]) -> Var:
            """``np.iinfo(np.int16)`` / ``np.finfo(np.float32)`` of a constant dtype: the
            answer depends on the dtype alone, so it is a constant of the trace (its ``max``,
            ``min``, ``eps``, ``bits``, ... read as constants)."""
            if len(args) != 1 or kwargs:
                raise Unsupported(f"numpy.{info.__name__} called with other than one argument")
            try:
                return ObjectVar(info(_dtype_constant(vm, args[0])))
            except (TypeError, ValueError) as exc:
                raise throw(type(exc), *exc.args) from exc

    _type_info(_NP.iinfo)
    _type_info(_NP.finfo)
