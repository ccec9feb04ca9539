"""Monkeypatched methods: replacing a method on an instance or on its class after the first
compile must recompile (the lookup's result is guarded), never run the old method."""

from __future__ import annotations

import torch
from feat_support import compiled, fresh_counter
from vm_harness import check


class Scaler:
    def __init__(self, k):
        self.k = k

    def __eq__(self, other):
        return type(other) is Scaler and vars(other) == vars(self)

    def apply(self, t):
        return t * self.k

    @staticmethod
    def shift(t):
        return t + 1

    @classmethod
    def name(cls):
        return cls.__name__

    @property
    def double_k(self):
        return self.k * 2


def use_scaler(s, t):
    return s.apply(t), s.shift(t), s.name(), t * s.double_k


def test_class_methods_of_an_argument_match_eager():
    check(use_scaler, Scaler(3.0), torch.randn(3))


def _run_both(fn, *args):
    for got, expected in zip(fn(*args), use_scaler(*args), strict=True):
        if isinstance(expected, torch.Tensor):
            torch.testing.assert_close(got, expected)
        else:
            assert got == expected


def test_patching_the_method_on_the_instance_recompiles():
    counter = fresh_counter()
    fn = compiled(use_scaler, counter)
    s, t = Scaler(2.0), torch.randn(3)
    _run_both(fn, s, t)
    s.apply = lambda t: t - 100
    _run_both(fn, s, t)
    assert counter.count == 2
    del s.apply
    _run_both(fn, s, t)
    assert counter.count == 2  # back to the class's method: the first entry serves


def test_patching_the_method_on_the_class_recompiles():
    counter = fresh_counter()
    fn = compiled(use_scaler, counter)
    s, t = Scaler(2.0), torch.randn(3)
    _run_both(fn, s, t)
    original = Scaler.apply
    try:
        Scaler.apply = lambda self, t: t / self.k
        _run_both(fn, s, t)
        assert counter.count == 2
    finally:
        Scaler.apply = original


def test_patching_static_class_methods_and_properties_recompiles():
    counter = fresh_counter()
    fn = compiled(use_scaler, counter)
    s, t = Scaler(2.0), torch.randn(3)
    _run_both(fn, s, t)
    saved = {k: Scaler.__dict__[k] for k in ("shift", "name", "double_k")}
    try:
        Scaler.shift = staticmethod(lambda t: t + 2)
        _run_both(fn, s, t)
        Scaler.name = classmethod(lambda cls: "renamed")
        _run_both(fn, s, t)
        Scaler.double_k = property(lambda self: self.k * 3)
        _run_both(fn, s, t)
        assert counter.count == 4
    finally:
        for key, value in saved.items():
            setattr(Scaler, key, value)


def make_and_use(t):
    return Scaler(2.0).apply(t)


def test_patching_the_class_of_an_object_made_inside_recompiles():
    counter = fresh_counter()
    fn = compiled(make_and_use, counter)
    t = torch.randn(3)
    torch.testing.assert_close(fn(t), make_and_use(t))
    original = Scaler.apply
    try:
        Scaler.apply = lambda self, t: t - self.k
        torch.testing.assert_close(fn(t), make_and_use(t))
        assert counter.count == 2
    finally:
        Scaler.apply = original


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def helper(self, x):
        return x.relu()

    def forward(self, x):
        return self.helper(self.lin(x))


def test_patching_a_module_method_or_forward_recompiles():
    counter = fresh_counter()
    net = Net()
    fn = compiled(net, counter)
    x = torch.randn(2, 3)
    torch.testing.assert_close(fn(x), net(x))
    net.helper = lambda x: x.sigmoid()
    torch.testing.assert_close(fn(x), net(x))
    assert counter.count == 2
    original = Net.forward
    try:
        Net.forward = lambda self, x: self.lin(x) * 2
        torch.testing.assert_close(fn(x), net(x))
        assert counter.count == 3
    finally:
        Net.forward = original
