"""Guard sources travel as Source records end to end: predicates name their operands, and the
transformed code reads each source from its fields, never from its text.

Where a source has a faithful text form, the guards are the ones the text gave (each
predicate evaluated as written over L/G agrees with the compiled check); where it has none
(dict keys with no literal, attribute names that are not identifiers, builtins shadowed by a
frame name) the compiled function still does what eager does, on the inputs it was made
from and on inputs that fail its guards.
"""

from __future__ import annotations

import copy
import dis
import enum
from collections.abc import Callable
from typing import Any

import pytest
import torch
from vm_harness import assert_same, run_vm

import compile_api
from guards import GuardSet, Shape, compile_guards


class Color(enum.Enum):
    A = 1
    B = 2


class Obj:
    pass


def _obj(**attrs: object) -> Obj:
    o = Obj()
    for name, value in attrs.items():
        setattr(o, name, value)
    return o


def _predicates(fn: Callable[..., Any], *args: Any, **kw: Any) -> tuple[list[Shape], Any]:
    compiled = run_vm(fn, *args, **kw)
    shapes = [g for g in compiled.result.guards.guards if isinstance(g, Shape)]
    return shapes, compiled


def _eval_as_written(guard: Shape, f_locals: dict[str, Any], g: dict[str, Any]) -> bool:
    """The predicate evaluated from its sources' text, as guards used to receive it."""
    try:
        return bool(eval(guard.shown(), {"L": f_locals, "G": g}))
    except Exception:
        return False


# -- ordinary names: the same guards as their text form -------------------------------------


def tied(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


def tied_in_dict(d: dict[str, torch.Tensor]) -> torch.Tensor:
    return d["x"] * d["y"]


def has_zz(o: Obj, x: torch.Tensor) -> torch.Tensor:
    return x + (1 if hasattr(o, "zz") else 2)


def set_order(s: set[int], x: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
    return x + len(s), list(s)


def reshape_to(s: torch.Size, x: torch.Tensor) -> torch.Tensor:
    return x.reshape(s)


def cat_odd(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.cat([x, y]) if x.shape[1] % 2 else x


Case = tuple[Callable[..., Any], tuple[Any, ...], tuple[Any, ...], dict[str, Any]]


def _ordinary_cases() -> list[Case]:
    t = torch.randn(3)
    return [
        (tied, (t, t), (t, torch.randn(3)), {}),
        (tied_in_dict, ({"x": t, "y": t},), ({"x": t, "y": t.clone()},), {}),
        (has_zz, (Obj(), torch.randn(3)), (_obj(zz=1), torch.randn(3)), {}),
        (set_order, ({3, 1}, torch.randn(3)), ({3, 2}, torch.randn(3)), {}),
        (reshape_to, (torch.Size([3, 1]), t), (torch.Size([1, 3]), t), {}),
        (cat_odd, (torch.randn(4, 3), torch.randn(5, 3)), (torch.randn(4, 4), torch.randn(5, 4)),
         {"dynamic": True}),
    ]


@pytest.mark.parametrize(
    ("fn", "args", "other", "kw"), _ordinary_cases(), ids=lambda v: getattr(v, "__name__", "")
)
def test_predicates_on_ordinary_names_agree_with_their_text_form(
    fn: Callable[..., Any], args: tuple[Any, ...], other: tuple[Any, ...], kw: dict[str, Any]
) -> None:
    shapes, compiled = _predicates(fn, *args, **kw)
    assert shapes, "the program relies on a predicate"
    g = fn.__globals__
    for inputs in (args, other):
        f_locals = dict(zip(fn.__code__.co_varnames, inputs))
        for shape in shapes:  # each predicate alone: structured check == its text form
            alone = GuardSet()
            alone.add(shape)
            assert compile_guards(alone, g)(f_locals) == _eval_as_written(shape, f_locals, g)
    # The other inputs break one of the predicates, and so the whole check.
    f_other = dict(zip(fn.__code__.co_varnames, other))
    assert not all(_eval_as_written(s, f_other, g) for s in shapes)
    assert not compiled.guard(f_other)


def test_predicate_operands_are_sources_not_text() -> None:
    t = torch.randn(3)
    shapes, _ = _predicates(tied, t, t)
    (predicate,) = [s for s in shapes if s.label == "PREDICATE"]
    assert predicate.predicate == "a is b"
    assert {k: s.name() for k, s in predicate.operands} in (
        {"a": "L['b']", "b": "L['a']"},
        {"a": "L['a']", "b": "L['b']"},
    )


# -- names with no faithful text: compared with eager ---------------------------------------


def tied_under_enum_keys(d: dict[Color, torch.Tensor]) -> torch.Tensor:
    return d[Color.A] + d[Color.B]


def hasattr_under_enum_key(d: dict[Color, Obj], x: torch.Tensor) -> torch.Tensor:
    return x + 1 if hasattr(d[Color.A], "foo") else x - 1


def set_under_enum_key(d: dict[Color, set[int]], x: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
    s = d[Color.A]
    return x + len(s), list(s)


def _weird(o: Obj) -> object:
    return getattr(o, "a-b")


def read_odd_attribute_with_getattr_shadowed(
    x: torch.Tensor, o: Obj, getattr: object = None
) -> tuple[torch.Tensor, object]:
    return x + 1, _weird(o)


def rebuild_with_builtins_shadowed(
    x: torch.Tensor, xs: list[int], iter: object = None, set: object = None
) -> tuple[torch.Tensor, object, object]:
    it = builtins_iter(xs)
    next(it)
    return x + 1, it, {1, 2}


builtins_iter = iter


def store_with_setattr_shadowed(x: torch.Tensor, o: Obj, setattr: object = None) -> torch.Tensor:
    o.k = x.sum()
    return x * 2


def hasattr_on_odd_attribute(o: Obj, x: torch.Tensor) -> torch.Tensor:
    inner = getattr(o, "in ner")
    return x + (1 if hasattr(inner, "zz") else 2)


def keyword_attribute(o: Obj, x: torch.Tensor) -> tuple[torch.Tensor, object]:
    return x * getattr(o, "class"), getattr(o, "lambda")


def odd_dict_keys(d: dict[object, int], x: torch.Tensor) -> torch.Tensor:
    return x * d["a b"] + d[None] + d[Color.B] + d[2.5]


def _odd_cases() -> list[tuple[Callable[..., Any], tuple[Any, ...], tuple[Any, ...]]]:
    t = torch.randn(3)
    return [
        (tied_under_enum_keys, ({Color.A: t, Color.B: t},), ({Color.A: t, Color.B: t + 1},)),
        (hasattr_under_enum_key, ({Color.A: Obj()}, t), ({Color.A: _obj(foo=1)}, t)),
        (set_under_enum_key, ({Color.A: {1, 2}}, t), ({Color.A: {2, 9}}, t)),
        (read_odd_attribute_with_getattr_shadowed,
         (t, _obj(**{"a-b": [1, 2]})), (t, _obj(**{"a-b": (3,)}))),
        (rebuild_with_builtins_shadowed, (t, [1, 2, 3]), (t, [4, 5])),
        (store_with_setattr_shadowed, (t, Obj()), (t + 1, Obj())),
        (hasattr_on_odd_attribute,
         (_obj(**{"in ner": Obj()}), t), (_obj(**{"in ner": _obj(zz=0)}), t)),
        (keyword_attribute,
         (_obj(**{"class": 2.0, "lambda": [1]}), t), (_obj(**{"class": 3.0, "lambda": [2]}), t)),
        (odd_dict_keys, ({"a b": 2, None: 3, Color.B: 4, 2.5: 5}, t),
         ({"a b": 7, None: 3, Color.B: 4, 2.5: 1}, t)),
    ]


def _case_id(value: object) -> str:
    return getattr(value, "__name__", "")


def _same_object_graph(actual: Any, expected: Any) -> None:
    """Equal values, user objects compared by their attributes, iterators by what is left."""
    if isinstance(expected, Obj):
        assert type(actual) is Obj
        _same_object_graph(vars(actual), vars(expected))
    elif isinstance(expected, dict):
        assert type(actual) is type(expected) and list(actual) == list(expected)
        for key in expected:
            _same_object_graph(actual[key], expected[key])
    elif isinstance(expected, set):
        assert type(actual) is set and actual == expected
    elif type(expected) is list:
        assert type(actual) is list and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _same_object_graph(a, e)
    elif type(expected).__name__.endswith("iterator"):
        assert type(actual) is type(expected)
        assert list(actual) == list(expected)
    elif isinstance(expected, tuple) and not isinstance(expected, torch.Size):
        assert type(actual) is type(expected) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _same_object_graph(a, e)
    else:
        assert_same(actual, expected)


@pytest.mark.parametrize(("fn", "args", "other"), _odd_cases(), ids=_case_id)
def test_odd_names_and_keys_run_as_eager_through_the_vm(
    fn: Callable[..., Any], args: tuple[Any, ...], other: tuple[Any, ...]
) -> None:
    eager_in, vm_in = copy.deepcopy(args), copy.deepcopy(args)
    compiled = run_vm(fn, *vm_in)  # the capture, its guards and its code, against eager
    _same_object_graph(compiled.output, fn(*eager_in))
    _same_object_graph(list(vm_in), list(eager_in))
    f_locals = dict(zip(fn.__code__.co_varnames, other))
    if not compiled.guard(f_locals):
        return  # a guard that fails sends the call back to be captured again: sound
    # Guards pass on the other inputs: the code must still do what eager does there.
    eager_in, vm_in = copy.deepcopy(other), copy.deepcopy(other)
    _same_object_graph(compiled.fn(*vm_in), fn(*eager_in))
    _same_object_graph(list(vm_in), list(eager_in))


@pytest.mark.parametrize(("fn", "args", "other"), _odd_cases(), ids=_case_id)
def test_odd_names_and_keys_compile_and_recompile_as_eager(
    fn: Callable[..., Any], args: tuple[Any, ...], other: tuple[Any, ...],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(compile_api.config, "suppress_errors", False)
    compile_api.reset()
    try:
        compiled = compile_api.compile(fn, backend="eager")
        for inputs in (args, other, args):
            eager_in, vm_in = copy.deepcopy(inputs), copy.deepcopy(inputs)
            _same_object_graph(compiled(*vm_in), fn(*eager_in))
            _same_object_graph(list(vm_in), list(eager_in))
    finally:
        compile_api.reset()


def test_transformed_code_never_calls_a_frame_name_for_a_builtin() -> None:
    o = _obj(**{"a-b": [1, 2]})
    compiled = run_vm(read_odd_attribute_with_getattr_shadowed, torch.randn(3), o)
    assert compiled.output[1] == [1, 2]
    loads = {i.argval for i in dis.get_instructions(compiled.result.code)
             if i.opname.startswith(("LOAD_FAST", "LOAD_DEREF"))}
    assert "getattr" not in loads  # the frame's own getattr is never the one called


def has_foo(o: Obj, x: torch.Tensor) -> torch.Tensor:
    return x + 1 if hasattr(o, "foo") else x - 1


def test_an_attribute_hasattr_found_on_the_instance_is_guarded_present(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The entry made while o.foo exists must not serve an object of the same class without it.
    monkeypatch.setattr(compile_api.config, "suppress_errors", False)
    compile_api.reset()
    try:
        compiled = compile_api.compile(has_foo, backend="eager")
        x = torch.zeros(2)
        for o in (Obj(), _obj(foo=1), Obj(), _obj(foo=2)):
            assert_same(compiled(o, x), has_foo(o, x))
    finally:
        compile_api.reset()


def scale_entry(d: dict[Color, torch.Tensor]) -> torch.Tensor:
    return d[Color.A] * 2


def test_automatic_dynamic_keys_tensors_by_source_odd_keys_included(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Sizes 3 then 4 at d[Color.A]: the second compile makes that dim symbolic, so size 5 reuses
    # it (compile_api keys automatic dynamic by Source, the capture looks the Source up).
    import evalframe

    monkeypatch.setattr(compile_api.config, "suppress_errors", False)
    compile_api.reset()
    try:
        compiled = compile_api.compile(scale_entry, backend="eager")
        for n in (3, 4, 5, 6):
            d = {Color.A: torch.randn(n)}
            assert_same(compiled(d), scale_entry(d))
        assert len(evalframe.cache_entries(scale_entry.__code__)) == 2
    finally:
        compile_api.reset()
