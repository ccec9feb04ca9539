"""``Cls.__dict__`` read in a compiled function is a view of the class's namespace: guarded by
the class and the entries/keys read through it, never by the identity of the fresh mappingproxy
each read makes. Compiled once for repeated calls; a class attribute changed between calls
recompiles once and gives the new value (each call compared with eager and torch.compile)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from counting_backend import Counting
from torch_reference import torch_reference

import compile_api


def _make_class() -> type:
    class Cls:
        x = 2.0
        y = 3

    return Cls


def _reads(cls: type) -> Callable[[torch.Tensor], Any]:
    def fn(t: torch.Tensor) -> Any:
        scaled = t * cls.__dict__["x"]
        has_x = "x" in cls.__dict__
        has_z = "z" in cls.__dict__
        public = [k for k in cls.__dict__ if not k.startswith("_")]
        return scaled + len(public), has_x, has_z, public

    return fn


class _TorchCounter:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self, gm: torch.fx.GraphModule, inputs: Any) -> Callable[..., Any]:
        self.count += 1
        return gm.forward


def _same(got: Any, eager: Any) -> None:
    for g, e in zip(got, eager, strict=True):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(g, e)
        else:
            assert g == e


def _check(ours: Any, theirs: Any, eager: Any) -> None:
    _same(ours, eager)
    with torch_reference():
        _same(theirs, eager)


def test_class_dict_reads_compile_once_and_a_changed_attribute_recompiles_once() -> None:
    compile_api.reset()
    torch._dynamo.reset()
    cls = _make_class()
    fn = _reads(cls)
    ours, theirs = Counting(), _TorchCounter()
    compiled = compile_api.compile(fn, backend=ours)
    reference = torch.compile(fn, backend=theirs)
    for _ in range(4):
        t = torch.arange(3.0)
        _check(compiled(t), reference(t), fn(t))
    assert ours.count == 1
    with torch_reference():
        assert ours.count == theirs.count
    cls.x = 5.0  # type: ignore[attr-defined]
    for _ in range(2):
        t = torch.arange(3.0)
        _check(compiled(t), reference(t), fn(t))
    assert ours.count == 2
    with torch_reference():
        assert ours.count == theirs.count
    cls.z = 1  # type: ignore[attr-defined]  # a new key: "in" and the key order change
    t = torch.arange(3.0)
    _check(compiled(t), reference(t), fn(t))
    assert ours.count == 3


def test_a_missing_key_raises_key_error_as_eager() -> None:
    compile_api.reset()
    cls = _make_class()

    def fn(t: torch.Tensor) -> torch.Tensor:
        try:
            return t * cls.__dict__["missing"]
        except KeyError:
            return t - 1

    ours = Counting()
    compiled = compile_api.compile(fn, backend=ours)
    for _ in range(3):
        t = torch.arange(3.0)
        torch.testing.assert_close(compiled(t), fn(t))
    cls.missing = 4.0  # type: ignore[attr-defined]
    t = torch.arange(3.0)
    torch.testing.assert_close(compiled(t), fn(t))


def test_writing_through_the_class_dict_raises_type_error_as_eager() -> None:
    compile_api.reset()
    cls = _make_class()

    def fn(t: torch.Tensor) -> torch.Tensor:
        try:
            cls.__dict__["x"] = 1.0  # type: ignore[index]
        except TypeError:
            return t + 1
        return t

    compiled = compile_api.compile(fn, backend=Counting())
    t = torch.arange(3.0)
    torch.testing.assert_close(compiled(t), fn(t))
    assert cls.__dict__["x"] == 2.0


@pytest.mark.parametrize("store", [True, False])
def test_a_class_attribute_stored_in_the_trace_shows_in_the_dict(store: bool) -> None:
    compile_api.reset()
    ours_cls, eager_cls = _make_class(), _make_class()

    def make(cls: type) -> Callable[[torch.Tensor], torch.Tensor]:
        def fn(t: torch.Tensor) -> torch.Tensor:
            if store:
                cls.x = 7.0  # type: ignore[attr-defined]
            return t * cls.__dict__["x"]

        return fn

    compiled = compile_api.compile(make(ours_cls), backend=Counting())
    t = torch.arange(3.0)
    torch.testing.assert_close(compiled(t), make(eager_cls)(t))
    assert ours_cls.__dict__["x"] == eager_cls.__dict__["x"]


def _methods(cls: type) -> Callable[[torch.Tensor], Any]:
    def fn(t: torch.Tensor) -> Any:
        scaled = t * cls.__dict__.get("x", 1.0) + cls.__dict__.get("nope", 0.5)
        public = [k for k in cls.__dict__.keys() if not k.startswith("_")]
        values = [v for k, v in cls.__dict__.items() if k in ("x", "y")]
        return scaled, public, values, len(cls.__dict__.values()) > 0

    return fn


def test_class_dict_methods_compile_once_and_recompile_on_a_change() -> None:
    compile_api.reset()
    torch._dynamo.reset()
    cls = _make_class()
    fn = _methods(cls)
    ours, theirs = Counting(), _TorchCounter()
    compiled = compile_api.compile(fn, backend=ours)
    reference = torch.compile(fn, backend=theirs)
    for _ in range(3):
        t = torch.arange(3.0)
        _check(compiled(t), reference(t), fn(t))
    assert ours.count == 1
    with torch_reference():
        assert ours.count == theirs.count
    cls.x = 4.0  # type: ignore[attr-defined]
    t = torch.arange(3.0)
    _check(compiled(t), reference(t), fn(t))
    assert ours.count == 2


def test_a_returned_view_or_copy_has_eager_type_and_leaves_the_class_alone() -> None:
    compile_api.reset()
    cls = _make_class()

    def fn(t: torch.Tensor) -> Any:
        copied = cls.__dict__.copy()
        copied["x"] = 9.0
        return t + 1, cls.__dict__.keys(), copied

    compiled = compile_api.compile(fn, backend=Counting())
    t = torch.arange(3.0)
    ours, eager = compiled(t), fn(t)
    torch.testing.assert_close(ours[0], eager[0])
    assert type(ours[1]) is type(eager[1]) and list(ours[1]) == list(eager[1])
    assert type(ours[2]) is dict and ours[2] == eager[2]
    assert cls.__dict__["x"] == 2.0


def _copies(cls: type, form: str) -> Callable[[torch.Tensor], Any]:
    def fn(t: torch.Tensor) -> Any:
        if form == "dict":
            d = dict(cls.__dict__)
        elif form == "unpack":
            d = {**cls.__dict__}
        elif form == "update":
            d = {}
            d.update(cls.__dict__)
        else:
            d = dict(vars(cls))
        public = sorted(k for k in d if not k.startswith("_"))
        return t * d["x"] + len(public), public, d["y"]

    return fn


@pytest.mark.parametrize("form", ["dict", "unpack", "update", "vars"])
def test_copying_the_class_dict_compiles_once_and_recompiles_once_per_change(form: str) -> None:
    compile_api.reset()
    torch._dynamo.reset()
    cls = _make_class()
    fn = _copies(cls, form)
    ours, theirs = Counting(), _TorchCounter()
    compiled = compile_api.compile(fn, backend=ours)
    reference = torch.compile(fn, backend=theirs)
    for _ in range(4):
        t = torch.arange(3.0)
        _check(compiled(t), reference(t), fn(t))
    assert ours.count == 1
    assert ours.count == theirs.count
    cls.z = 1  # type: ignore[attr-defined]  # a new key: recompiled once, seen in the copy
    for _ in range(3):
        t = torch.arange(3.0)
        _check(compiled(t), reference(t), fn(t))
    assert ours.count == 2
    assert ours.count == theirs.count
    cls.x = 4.0  # type: ignore[attr-defined]  # a changed entry
    t = torch.arange(3.0)
    _check(compiled(t), reference(t), fn(t))
    assert ours.count == 3
    assert compile_api.explain(fn)(torch.arange(3.0)).break_reasons == []
