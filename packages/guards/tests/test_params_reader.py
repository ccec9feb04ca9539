"""params_reader: the transformed code's one-call parameter read (C++ WeakTuple or Python)."""

from __future__ import annotations

import gc
import sys
import weakref
from typing import Any

import pytest
import torch

from guards import params_reader


def test_reader_returns_the_very_objects_in_order() -> None:
    params = [torch.nn.Parameter(torch.randn(3)) for _ in range(5)]
    got = params_reader(params)()
    assert type(got) is tuple
    assert len(got) == 5 and all(a is b for a, b in zip(got, params, strict=True))


def test_reader_hands_over_in_place_changes_of_the_same_object() -> None:
    p = torch.nn.Parameter(torch.zeros(2))
    read = params_reader([p])
    with torch.no_grad():
        p.data = torch.ones(4, dtype=torch.float64)
    (q,) = read()
    assert q is p and q.shape == (4,) and q.dtype == torch.float64


def test_reader_raises_reference_error_once_a_referent_died() -> None:
    keep = torch.randn(2)
    dies = torch.randn(2)
    read = params_reader([keep, dies])
    del dies
    gc.collect()
    with pytest.raises(ReferenceError):
        read()


def test_reader_of_nothing_is_the_empty_tuple() -> None:
    assert params_reader([])() == ()


def test_reader_does_not_keep_its_objects_alive() -> None:
    p = torch.nn.Parameter(torch.randn(2))
    ref = weakref.ref(p)
    read = params_reader([p])
    del p
    gc.collect()
    assert ref() is None
    del read


def test_native_reader_is_the_cpp_weak_tuple(native: Any, check_path: str) -> None:
    if check_path == "python":
        pytest.skip("the native fixture turns the C++ path on")
    read = params_reader([torch.randn(1)])
    assert type(read) is native.WeakTuple


def test_weak_tuple_rejects_bad_arguments(native: Any) -> None:
    t = torch.randn(1)
    with pytest.raises(TypeError):
        native.WeakTuple([weakref.ref(t)])  # a list, not a tuple
    with pytest.raises(TypeError):
        native.WeakTuple((t,))  # not a weak reference
    with pytest.raises(TypeError):
        native.WeakTuple((weakref.proxy(t),))
    with pytest.raises(TypeError):
        native.WeakTuple((weakref.ref(t),))(t)  # takes no arguments


def test_weak_tuple_leaks_no_references(native: Any) -> None:
    params = [torch.nn.Parameter(torch.randn(2)) for _ in range(3)]
    read = native.WeakTuple(tuple(weakref.ref(p) for p in params))
    before = [sys.getrefcount(p) for p in params]
    for _ in range(1000):
        read()
    assert [sys.getrefcount(p) for p in params] == before
