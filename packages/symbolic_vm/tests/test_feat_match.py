"""``match`` statements: class patterns (positional via __match_args__ and keyword), mapping
patterns (with ``**rest``), sequence patterns, on constants, user classes and dataclasses.

The bytecode differs between 3.11 and 3.12 (jumps, copies), the MATCH_* instructions do not;
nothing here depends on one version's layout.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from feat_support import compiled, fresh_counter
from vm_harness import check


@dataclasses.dataclass
class Point:
    x: float
    y: float


class Shape:
    __match_args__ = ("kind", "scale")

    def __init__(self, kind, scale):
        self.kind = kind
        self.scale = scale

    def __eq__(self, other):
        return type(other) is Shape and vars(self) == vars(other)


def by_class(t, p):
    match p:
        case Point(x=0, y=yy):
            return t + yy
        case Point(xx, 2):
            return t * xx
        case Point():
            return t - 1
    return t


@pytest.mark.parametrize(
    "point", [Point(0, 3.0), Point(1.5, 2), Point(1.5, 7.0)], ids=["keyword", "positional", "bare"]
)
def test_match_class_on_a_dataclass_argument(point):
    compiled_run = check(by_class, torch.randn(3), point)
    assert compiled_run.op_count() == 1


def by_match_args(t, s):
    match s:
        case Shape("square", sc):
            return t * sc
        case Shape(kind="circle", scale=sc) if sc > 1:
            return t - sc
        case Shape(_, _):
            return t + 10
    return t


@pytest.mark.parametrize(
    "shape", [Shape("square", 2.0), Shape("circle", 3.0), Shape("circle", 0.5)],
    ids=["positional", "keyword-guard", "wildcard"],
)
def test_match_class_positional_through_match_args(shape):
    check(by_match_args, torch.randn(3), shape)


def test_match_class_on_an_object_made_inside():
    def fn(t):
        match Point(2.0, 3.0):
            case Point(x=2.0, y=yy):
                return t * yy
        return t

    check(fn, torch.randn(2))


def test_match_class_on_a_tensor_and_builtin_self_patterns():
    def fn(t, n, name):
        match t:
            case torch.Tensor():
                t = t * 2
        match n:
            case int(k):
                t = t + k
        match name:
            case str(s) if s.startswith("a"):
                t = t - 1
        return t

    check(fn, torch.randn(3), 4, "abc")


def test_match_class_fails_on_a_missing_attribute():
    class Bare:
        def __eq__(self, other):
            return type(other) is Bare

    def fn(t, obj):
        match obj:
            case Bare(missing=1):
                return t + 1
        return t * 2

    check(fn, torch.randn(2), Bare())


def by_mapping(t, cfg):
    match cfg:
        case {"mode": "add", "val": v, **rest}:
            return t + v + len(rest)
        case {"mode": m}:
            return t * len(m)
    return t


@pytest.mark.parametrize(
    "cfg",
    [{"mode": "add", "val": 1.5, "z": 1}, {"mode": "scale"}, {"other": 1}],
    ids=["keys-and-rest", "one-key", "no-match"],
)
def test_match_mapping_and_keys(cfg):
    check(by_mapping, torch.randn(3), cfg)


def test_match_sequence_on_constants_tuples_and_lists():
    def fn(t, seq):
        match seq:
            case [a, b, *rest]:
                t = t * a + b + len(rest)
        match (1, t):
            case (1, tt):
                t = tt + 1
        match "ab":
            case [_, _]:
                t = t * 100  # a str is never a sequence pattern's subject
        return t

    check(fn, torch.randn(3), [2, 3, 4, 5])


def test_changing_the_matched_value_recompiles():
    counter = fresh_counter()
    fn = compiled(by_class, counter)
    t = torch.randn(3)
    for point in (Point(0, 3.0), Point(0, 3.0), Point(1.5, 2), Point(1.5, 7.0)):
        torch.testing.assert_close(fn(t, point), by_class(t, point))
    assert counter.count == 3  # one entry per branch taken; the repeat reused the first


def test_changing_a_mapping_key_recompiles():
    counter = fresh_counter()
    fn = compiled(by_mapping, counter)
    t = torch.randn(3)
    for cfg in ({"mode": "add", "val": 1.0}, {"mode": "scale"}, {"mode": "add", "val": 1.0}):
        torch.testing.assert_close(fn(t, cfg), by_mapping(t, cfg))
    assert counter.count == 2
