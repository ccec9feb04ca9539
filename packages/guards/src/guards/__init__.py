"""Sources, guard kinds and a fast compiled guard check.

Build a ``GuardSet`` while tracing (one method per guard kind, each over a ``Source``),
then ``compile_guards(guard_set, f_globals)`` into a ``CompiledGuards`` usable as
``evalframe.Entry.guard``.
"""

from guards.check_fn import CompiledGuards, compile_guards
from guards.errors import GuardError, ShapeGuardError, UnsupportedGuardValue
from guards.guard import Guard
from guards.guard_set import GuardSet
from guards.module_calls import ModuleCalls
from guards.module_params import ModuleParams
from guards.readers import params_reader
from guards.shape import shape_guards
from guards.shape_guard import Shape
from guards.source import (
    AttrSource,
    CallSource,
    ClassDictSource,
    DictCopySource,
    GlobalSource,
    InstanceAttrSource,
    ItemSource,
    LocalSource,
    MethodCallSource,
    SetItemsSource,
    SizeSource,
    Source,
    StrideSource,
    TypeSource,
)
from guards.state_guards import DispatchTls, GlobalState
from guards.tensor_guard import TensorMatch
from guards.tensor_spec import StrideRel, TensorSpec
from guards.value_guards import ConstantMatch, DictKeys, IdMatch, Length, TypeMatch

__all__ = [
    # sources
    "Source",
    "LocalSource",
    "GlobalSource",
    "AttrSource",
    "ItemSource",
    "TypeSource",
    "SizeSource",
    "StrideSource",
    "CallSource",
    "MethodCallSource",
    "DictCopySource",
    "SetItemsSource",
    "InstanceAttrSource",
    "ClassDictSource",
    # building guards
    "GuardSet",
    "shape_guards",
    # the transformed code's parameter reads (identity guarded by MODULE_PARAMS / ID_MATCH)
    "params_reader",
    # compiled check
    "compile_guards",
    "CompiledGuards",
    # guard records
    "Guard",
    "TensorMatch",
    "TypeMatch",
    "IdMatch",
    "ConstantMatch",
    "Length",
    "DictKeys",
    "DispatchTls",
    "GlobalState",
    "Shape",
    "ModuleParams",
    "ModuleCalls",
    "TensorSpec",
    "StrideRel",
    # errors
    "GuardError",
    "UnsupportedGuardValue",
    "ShapeGuardError",
]
