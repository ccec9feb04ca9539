"""Constructs from PyTorch's own Dynamo tests (test_functions, test_misc, test_modules,
test_exceptions; docs/dynamo-tests-2026-11-27.md) that torch.compile 2.13 captures whole:
a deque extended by another deque made in the frame, ``np.iinfo``/``np.finfo`` of constant
dtypes, attributes stored on tensors (an input's replayed on it, an intermediate's kept on the
returned tensor, ``.grad`` of a tensor made inside), a module whose ``forward`` is a
staticmethod, ``len()`` through a module's own ``__len__``, ``super().classmethod()``, an
``nn.Module.__getattr__`` override that falls back after AttributeError, and lazy modules.
Each equals eager, is captured with ``fullgraph=True``, and in no more graphs than
torch.compile makes of it."""

from __future__ import annotations

import collections
import functools
import typing
from collections.abc import Callable, MutableMapping
from typing import Any

import numpy as np
import pytest
import torch
from object_model_harness import run_three_ways, same
from torch.nn.modules.lazy import LazyModuleMixin
from torch_reference import torch_reference

import compile_api

pytestmark = pytest.mark.usefixtures("errors_raise")


def _check(fn: Callable[..., Any], make_args: Callable[[], tuple[Any, ...]]) -> Any:
    """Eager, compile_api and torch.compile agree; compile_api also with fullgraph=True."""
    runs = run_three_ways(fn, make_args)
    same(runs.ours, runs.eager)
    same(runs.our_args, runs.eager_args)
    assert runs.our_graphs == 1
    with torch_reference():
        same(runs.theirs, runs.eager)
        assert runs.our_graphs <= runs.their_graphs
    compile_api.reset()
    whole = compile_api.compile(fn, backend="eager", fullgraph=True)(*make_args())
    same(whole, fn(*make_args()))
    return runs


# -- test_functions ------------------------------------------------------------------------


def _deques(a: torch.Tensor, b: torch.Tensor) -> Any:
    d = collections.deque([a, b])
    d.append(a + 1)
    d.extend([a, b])
    d.insert(0, "foo")
    tmp = d.pop()
    another = collections.deque([tmp, a * 3])
    d.extendleft(another)
    another.clear()
    d.extend(another)
    d[2] = "setitem"
    d = d.copy()
    d.append(d.popleft())
    d.extend(collections.deque())
    walked = [x for x in collections.deque([a, 2]) if isinstance(x, torch.Tensor)]
    return list(d), list(collections.deque(d, maxlen=2)), walked


def test_a_deque_extended_by_a_deque_made_in_the_frame_matches_eager() -> None:
    _check(_deques, lambda: (torch.arange(3.0), torch.ones(3)))


def _type_info(a: torch.Tensor) -> Any:
    info = np.iinfo(np.int16)
    small = np.finfo(np.float32)
    return a + info.max, a + small.min, info.bits, np.finfo("float64").eps, np.iinfo(np.uint8).min


def test_numpy_iinfo_and_finfo_of_constant_dtypes_are_constants() -> None:
    _check(_type_info, lambda: (torch.arange(3.0),))


def test_numpy_iinfo_of_a_float_dtype_raises_as_in_eager() -> None:
    def bad(a: torch.Tensor) -> Any:
        return a + np.iinfo(np.float32).max

    with pytest.raises(ValueError, match="Invalid integer data type"):
        bad(torch.ones(2))
    with pytest.raises(ValueError, match="Invalid integer data type"):
        compile_api.compile(bad, backend="eager")(torch.ones(2))


# -- test_misc: attributes stored on tensors --------------------------------------------------


def _input_attr(x: torch.Tensor, flag: bool) -> Any:
    x.offloading_activation = flag  # type: ignore[attr-defined]
    return x + 1 if x.offloading_activation else x - 1  # type: ignore[attr-defined]


def test_an_attribute_stored_on_an_input_tensor_is_replayed_on_it() -> None:
    runs = _check(_input_attr, lambda: (torch.ones(5), True))
    assert runs.our_args[0].offloading_activation is True
    x = torch.ones(5)
    compiled = compile_api.compile(_input_attr, backend="eager", fullgraph=True)
    same(compiled(x, False), torch.zeros(5))
    assert x.offloading_activation is False


def _intermediate_attr(x: torch.Tensor, flag: bool) -> Any:
    y = x + 1
    y.offloading_activation = flag  # type: ignore[attr-defined]
    return y


def test_an_attribute_stored_on_an_intermediate_tensor_stays_on_the_returned_one() -> None:
    runs = _check(_intermediate_attr, lambda: (torch.ones(5), True))
    assert runs.ours.offloading_activation is True
    assert runs.theirs.offloading_activation is True


def _new_tensor_grad(x: torch.Tensor) -> Any:
    y = x + 10
    y.grad = x
    y.foo = 42  # type: ignore[attr-defined]
    return y, y.grad * 2, y.foo  # type: ignore[attr-defined]


def test_grad_and_an_attribute_of_a_tensor_made_inside_reach_the_returned_tensor() -> None:
    runs = _check(_new_tensor_grad, lambda: (torch.ones(5),))
    same(runs.ours[0].grad, runs.eager[0].grad)
    assert runs.ours[0].foo == 42


def test_storing_a_tensor_attribute_its_class_defines_breaks_and_matches_eager() -> None:
    def fn(x: torch.Tensor) -> Any:
        y = x * 2
        y.requires_grad = True
        return y.requires_grad, y + 1

    backend_runs = run_three_ways(fn, lambda: (torch.ones(3),))
    same(backend_runs.ours, backend_runs.eager)
    with pytest.raises(compile_api.Unsupported):
        compile_api.compile(fn, backend="eager", fullgraph=True)(torch.ones(3))


# -- test_modules / test_exceptions: nn.Module protocols --------------------------------------


class _StaticForward(torch.nn.Module):
    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


class _CallsStatic(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mod = _StaticForward()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mod(x) + _StaticForward()(x)


def test_a_module_whose_forward_is_a_staticmethod_is_inlined() -> None:
    module = _CallsStatic()
    _check(lambda m, x: m(x), lambda: (module, torch.linspace(-2, 2, 4)))


class _OwnLen(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.ReLU()])

    def __getitem__(self, idx: int) -> torch.nn.Module:
        return self.layers[idx]

    def __len__(self) -> int:
        return len(self.layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(len(self)):
            x = self[i](x)
        return x if self else -x


def test_len_and_truth_of_a_module_go_through_its_own_len() -> None:
    module = _OwnLen()
    _check(lambda m, x: m(x), lambda: (module, torch.linspace(-2, 2, 8).reshape(2, 4)))


class _Parent(torch.nn.Module):
    @classmethod
    def custom_add(cls, x: torch.Tensor) -> torch.Tensor:
        return x + x

    @staticmethod
    def scale(x: torch.Tensor) -> torch.Tensor:
        return x * 3


class _Child(_Parent):
    @classmethod
    def child_func(cls, x: torch.Tensor) -> torch.Tensor:
        return super().custom_add(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.child_func(x) + super().custom_add(x) + super().scale(x)


def test_super_finds_classmethods_and_staticmethods() -> None:
    module = _Child()
    _check(lambda m, x: m(x), lambda: (module, torch.linspace(-2, 2, 4)))


class _Fallback(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_parameter("a", torch.nn.Parameter(torch.ones(4) * 2))

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)  # nn.Module's tables first
        except AttributeError:
            if name == "a_copy":
                return self.a
            raise

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.a * self.a_copy


def test_a_module_getattr_override_that_falls_back_after_attribute_error() -> None:
    module = _Fallback()
    _check(lambda m, x: m(x), lambda: (module, torch.ones(4)))


def test_the_getattr_fallback_recompiles_when_the_name_gets_set() -> None:
    module = _Fallback()
    compiled = compile_api.compile(lambda m, x: m(x), backend="eager", fullgraph=True)
    same(compiled(module, torch.ones(4)), torch.full((4,), 4.0))
    module.a_copy = torch.ones(4) * 5  # now an instance attribute: the fallback is not called
    same(compiled(module, torch.ones(4)), torch.full((4,), 10.0))


def test_a_module_subclass_made_in_the_frame_keeps_nn_module_init() -> None:
    """Its __init__ breaks (register_parameter); the frame hook then captures that __init__,
    where ``super().__init__()`` must really run (it ran as a no-op: the next line raised
    "cannot assign parameter before Module.__init__() call")."""

    class WithNone(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_parameter("p", None)
            self.k = 2

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.k

    def fn(x: torch.Tensor) -> torch.Tensor:
        return WithNone()(x)

    runs = run_three_ways(fn, lambda: (torch.ones(3),))
    same(runs.ours, runs.eager)
    with torch_reference():
        same(runs.theirs, runs.eager)


class _LazyMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.LazyLinear(10)
        self.fc2 = torch.nn.LazyLinear(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc2(torch.relu(self.fc1(x))))


def _lazy_runs(backend: Any, compile_fn: Callable[..., Any]) -> tuple[Any, Any, _LazyMLP]:
    torch.manual_seed(0)
    module = _LazyMLP()
    compiled = compile_fn(module, backend=backend, fullgraph=True)
    x = torch.rand(10, 10)
    first = compiled(x)
    again = compiled(x)
    return first, again, module


def test_a_lazy_module_is_initialized_then_traced_whole() -> None:
    torch.manual_seed(0)
    eager_module = _LazyMLP()
    x = torch.rand(10, 10)
    want = eager_module(x)
    ours = CountingGraphs()
    first, again, module = _lazy_runs(ours, compile_api.compile)
    same(first, want)
    same(again, module(x))
    assert isinstance(module.fc1, torch.nn.Linear)
    assert not isinstance(module.fc1, torch.nn.LazyLinear)
    assert module.fc1.weight.shape == (10, 10)
    assert ours.count == 1  # the second call reuses the graph: no stale guard
    theirs = CountingGraphs()
    torch._dynamo.reset()
    their_first, _, _ = _lazy_runs(theirs, torch.compile)
    torch._dynamo.reset()
    with torch_reference():
        same(their_first, want)
        assert ours.count <= theirs.count


def test_a_lazy_batchnorm_becomes_batchnorm_under_fullgraph() -> None:
    module = torch.nn.LazyBatchNorm3d(affine=False, track_running_stats=False)
    ours = CountingGraphs()
    compiled = compile_api.compile(lambda x: module(x), backend=ours, fullgraph=True)
    x = torch.ones(2, 3, 2, 2, 2)
    out = compiled(x)
    out2 = compiled(x)
    assert type(module) is torch.nn.BatchNorm3d
    same(out, module(x))
    same(out2, module(x))
    assert ours.count == 1


class CountingGraphs:
    """A backend counting the graphs it compiles (runs them as captured)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        self.count += 1
        return gm.forward


# -- test_functions: mappings -------------------------------------------------------------------


class _TensorDict(MutableMapping):  # type: ignore[type-arg]
    """A MutableMapping over a dict: its keys() is the ABC's KeysView, whose __iter__ is
    ``yield from self._mapping`` (the user object's own __iter__)."""

    def __init__(self) -> None:
        self._dict: dict[str, Any] = {}

    def __delitem__(self, key: str) -> None:
        del self._dict[key]

    def __getitem__(self, key: str) -> Any:
        return self._dict[key]

    def __iter__(self) -> Any:
        return iter(self._dict)

    def __len__(self) -> int:
        return len(self._dict)

    def __setitem__(self, key: str, value: Any) -> None:
        self._dict[key] = value


def _mapping_copies(x: torch.Tensor, m: _TensorDict) -> Any:
    copied = dict(m)
    unpacked = {**m, "b": 1}
    return x * copied["a"], unpacked["a"] + unpacked["b"], list(m.keys()), len(m)


def test_dict_of_a_user_mutable_mapping_reads_its_keys_view() -> None:
    def make() -> tuple[Any, ...]:
        m = _TensorDict()
        m["a"] = 2.5
        return torch.arange(4.0), m

    _check(_mapping_copies, make)


def _defaultdict_fromkeys(x: torch.Tensor) -> Any:
    d = collections.defaultdict.fromkeys("ab", 0)
    d["a"] = 1
    d.setdefault("c", 10)
    return x + d["c"] if d["c"] == 10 else x, type(d).__name__, d.default_factory, dict(d)


def test_defaultdict_fromkeys_makes_a_defaultdict_without_a_factory() -> None:
    _check(_defaultdict_fromkeys, lambda: (torch.arange(3.0),))


def _namedtuple_made_inside(x: torch.Tensor) -> Any:
    pair = collections.namedtuple("pair", ["x", "y", "xy"], defaults=(None, 1, None))
    t = pair(x, xy=x * 2)
    made = pair(t.x, t[1], t.xy + x)
    # not its __module__: torch.compile's is one of its own modules (ours is checked below)
    return tuple(made), type(made).__name__, made._fields, made._asdict()


def test_a_namedtuple_class_made_in_the_frame_is_made_once_while_tracing() -> None:
    _check(_namedtuple_made_inside, lambda: (torch.arange(3.0),))

    def returned(x: torch.Tensor) -> Any:
        return collections.namedtuple("pair", "a b")(x, 2)

    compile_api.reset()
    made = compile_api.compile(returned, backend="eager", fullgraph=True)(torch.ones(2))
    # eager makes a new class per call (so does the trace, once): its name, fields, module
    assert (type(made).__name__, made._fields, type(made).__module__) == ("pair", ("a", "b"),
                                                                          __name__)
    same(tuple(made), (torch.ones(2), 2))


def _hasattr_of_containers(x: torch.Tensor, d: dict[str, Any]) -> Any:
    made = [x]
    y = x + 1
    y.tag = 1  # type: ignore[attr-defined]
    return (
        torch.cos(d["a"]) if hasattr(d, "items") and not hasattr(d, "to") else x,
        hasattr(made, "append"), hasattr((x,), "count"), hasattr({1}, "nope"),
        hasattr(y, "tag"), hasattr(x, "tag"),
    )


def test_hasattr_of_lists_dicts_sets_tuples_and_stored_tensor_attributes() -> None:
    _check(_hasattr_of_containers, lambda: (torch.arange(3.0), {"a": torch.ones(2)}))


def _ordered_fromkeys_by_keyword(x: torch.Tensor) -> Any:
    d = collections.OrderedDict.fromkeys(("a", "b"), value=x)
    return d["a"] + d["b"], list(d)


def test_ordered_dict_fromkeys_takes_its_value_by_keyword() -> None:
    _check(_ordered_fromkeys_by_keyword, lambda: (torch.arange(3.0),))


def _small_builtins(x: torch.Tensor) -> Any:
    name = f"{x.__class__.__name__} foo"
    p = functools.partial(lambda a, y: a * y, y=2)
    repeated = 3 * [x]
    grown = [x]
    alias = grown
    grown *= 2
    kept = typing.Any
    return (
        sum(repeated), len(alias), name, type(x + 1).__name__,
        torch.jit.annotate(kept, x + 1) + 2,
        [hasattr(p, n) for n in ("func", "args", "keywords", "__dict__", "__call__", "__name__",
                                 "__code__", "__qualname__")],
        p(x),
    )


def test_tensor_class_sequence_repeat_jit_annotate_and_partial_hasattr_match_eager() -> None:
    _check(_small_builtins, lambda: (torch.arange(3.0),))


def test_repeating_a_sequence_by_a_float_raises_as_in_eager() -> None:
    def bad(x: torch.Tensor) -> Any:
        return [x] * 2.0

    with pytest.raises(TypeError, match="can't multiply sequence by non-int of type 'float'"):
        compile_api.compile(bad, backend="eager")(torch.ones(2))


def _type_info_of(a: torch.Tensor, spelled: Any) -> Any:
    return a + np.iinfo(spelled).max


@pytest.mark.parametrize("spelled", ["int16", np.int16, np.dtype("int16"), np.iinfo("int16")],
                         ids=["str", "type", "dtype", "iinfo"])
def test_numpy_iinfo_of_a_dtype_passed_in_in_any_spelling(spelled: Any) -> None:
    _check(_type_info_of, lambda: (torch.zeros(2), spelled))


def test_numpy_iinfo_of_another_dtype_passed_in_recompiles() -> None:
    compiled = compile_api.compile(_type_info_of, backend="eager", fullgraph=True)
    for spelled in (np.iinfo("int16"), np.iinfo("int8"), np.dtype("int16"), np.dtype("uint8")):
        same(compiled(torch.zeros(2), spelled), _type_info_of(torch.zeros(2), spelled))


# -- test_repros: a custom autograd.Function whose backward cannot run ----------------------

_BACKWARD_CALLS: list[int] = []


class _ThroughLayers(torch.autograd.Function):
    """Its backward has a Python effect (torch.compile cannot make it one graph node), and its
    forward takes modules: where no backward can run, eager runs only the forward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, layers: torch.nn.ModuleList) -> torch.Tensor:
        for layer in layers:
            x = layer(x)
        ctx.save_for_backward(x.detach())
        ctx.layers = layers
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        _BACKWARD_CALLS.append(1)
        return grad * 2, None


_LAYERS = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.Tanh()])


def _apply_through_layers(x: torch.Tensor) -> Any:
    y = _ThroughLayers.apply(x + 1, _LAYERS)
    return y, y.requires_grad


def test_a_function_called_under_no_grad_traces_its_forward_in_one_graph() -> None:
    with torch.no_grad():
        _check(_apply_through_layers, lambda: (torch.linspace(-1, 1, 8).reshape(2, 4),))


def test_a_function_whose_inputs_need_no_grad_traces_its_forward_without_recording() -> None:
    # grad mode on, parameters requiring grad, the input not: eager's forward runs with grad
    # off, so the result does not require grad (the traced forward switches grad off too)
    # (torch.compile's result requires grad here, unlike eager's: not compared)
    runs = run_three_ways(_apply_through_layers, lambda: (torch.linspace(-1, 1, 8).reshape(2, 4),))
    same(runs.ours, runs.eager)
    assert runs.ours[1] is False and runs.our_graphs == 1
    with torch_reference():
        same(runs.theirs[0], runs.eager[0])
        assert runs.our_graphs <= runs.their_graphs


def test_a_function_whose_backward_can_run_still_breaks_at_its_effect() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return _ThroughLayers.apply(x, _LAYERS).sum()

    def make() -> tuple[torch.Tensor]:
        return (torch.linspace(-1, 1, 8).reshape(2, 4).requires_grad_(),)

    with pytest.raises(compile_api.Unsupported, match="Python side effect"):
        compile_api.compile(fn, backend="eager", fullgraph=True)(*make())
    compile_api.reset()
    (x,) = make()
    compile_api.compile(fn, backend="eager")(x).backward()
    (want,) = make()
    fn(want).backward()
    same(x.grad, want.grad)


def _reads_a_tag(x: torch.Tensor) -> Any:
    tagged = hasattr(x, "tag")
    return (x + x.tag if tagged else x - 1), tagged, hasattr(x, "fake_mode"), hasattr(x, "add")


def test_an_attribute_an_input_tensor_already_has_is_seen_and_guarded() -> None:
    """hasattr() answered from the fake value said False for an input's own attribute (and
    True for a FakeTensor's fake_mode): eager's answer, with a guard on its instance dict."""
    compiled = compile_api.compile(_reads_a_tag, backend="eager", fullgraph=True)
    tagged, plain = torch.ones(2), torch.ones(2)
    tagged.tag = 5  # type: ignore[attr-defined]
    for x in (tagged, plain, tagged):
        same(compiled(x), _reads_a_tag(x))

    def make() -> tuple[torch.Tensor]:
        x = torch.ones(2)
        x.tag = 3  # type: ignore[attr-defined]
        return (x,)

    _check(_reads_a_tag, make)


class _LazyInput(typing.NamedTuple):
    x: dict[str, list[torch.Tensor]]
    y: torch.Tensor


class _LazyOnNamedTuple(LazyModuleMixin, torch.nn.Module):
    def initialize_parameters(self, inp: _LazyInput) -> None:  # type: ignore[override]
        with torch.no_grad():
            self.scale = torch.nn.Parameter(torch.empty(inp.x["a"][0].shape).fill_(0.5))

    def forward(self, inp: _LazyInput) -> torch.Tensor:
        total = inp.y
        for t in inp.x["a"]:
            total = total + t
        return total * self.scale


class _LazyBadInit(LazyModuleMixin, torch.nn.Module):
    def initialize_parameters(self, *args: Any) -> None:  # type: ignore[override]
        self.missing.bar = 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


def test_a_compiled_lazy_root_module_initializes_on_its_first_call() -> None:
    def make() -> _LazyInput:
        return _LazyInput(x={"a": [torch.ones(3), torch.arange(3.0)]}, y=torch.ones(3))

    ours = CountingGraphs()
    module = _LazyOnNamedTuple()
    compiled = compile_api.compile(module, backend=ours, fullgraph=True)
    first, again = compiled(make()), compiled(make())
    same(first, module(make()))
    same(again, first)
    assert ours.count == 1 and not module.has_uninitialized_params()
    theirs = CountingGraphs()
    torch._dynamo.reset()
    their_module = _LazyOnNamedTuple()
    their = torch.compile(their_module, backend=theirs, fullgraph=True)(make())
    torch._dynamo.reset()
    with torch_reference():
        same(their, first)
        assert ours.count <= theirs.count


def test_a_lazy_module_whose_initialization_fails_raises_eagers_error() -> None:
    with pytest.raises(AttributeError, match="missing"):
        compile_api.compile(_LazyBadInit(), backend="eager")(torch.ones(2))
