"""Side effects replayed after the graph, return-value rebuilding, and guards from provenance."""

from __future__ import annotations

import types

import pytest
import torch
from vm_harness import check, run_vm

from guards import compile_guards
from symbolic_vm import CaptureConfig, capture, frame_from_call

LOG: list = []
REGISTRY: dict = {}
COUNTER = 0


class Holder:
    pass


HOLDER = Holder()


def appends_to_global_list(x):
    y = x * 2
    LOG.append(y)
    LOG.append("done")
    return y + 1


def updates_global_dict(x):
    REGISTRY["out"] = x.sum()
    REGISTRY.update({"n": 3})
    return x


def rebinds_global(x):
    global COUNTER
    COUNTER = COUNTER + 1
    return x * COUNTER


def writes_attribute(x, obj):
    obj.value = x + 1
    obj.tag = "set"
    return obj.value * 2


def mutates_input_list(x, xs):
    xs.append(x * 3)
    xs[0] = xs[0] + 1
    return len(xs)


def mutates_input_dict(x, d):
    d["new"] = x - 1
    del d["old"]
    return d


def test_global_list_append_is_replayed():
    LOG.clear()
    x = torch.randn(3)
    compiled = run_vm(appends_to_global_list, x)
    torch.testing.assert_close(compiled.output, x * 2 + 1)
    assert len(LOG) == 2 and LOG[1] == "done"
    torch.testing.assert_close(LOG[0], x * 2)


def test_global_dict_update_is_replayed():
    REGISTRY.clear()
    x = torch.randn(3)
    run_vm(updates_global_dict, x)
    torch.testing.assert_close(REGISTRY["out"], x.sum())
    assert REGISTRY["n"] == 3 and list(REGISTRY) == ["out", "n"]


def test_global_rebinding_is_replayed_and_read_back():
    global COUNTER
    COUNTER = 5
    x = torch.randn(3)
    compiled = run_vm(rebinds_global, x)
    assert COUNTER == 6
    torch.testing.assert_close(compiled.output, x * 6)


def test_attribute_writes_on_an_argument_are_replayed():
    obj = Holder()
    x = torch.randn(3)
    compiled = run_vm(writes_attribute, x, obj)
    torch.testing.assert_close(obj.value, x + 1)
    assert obj.tag == "set"
    torch.testing.assert_close(compiled.output, (x + 1) * 2)


def test_input_list_mutation_is_replayed_on_the_same_list():
    check(mutates_input_list, torch.randn(2), [torch.randn(2)])


def test_input_dict_mutation_returns_the_same_dict_object():
    d = {"old": 1, "keep": torch.randn(2)}
    x = torch.randn(2)
    compiled = run_vm(mutates_input_dict, x, d)
    assert compiled.output is d
    assert list(d) == ["keep", "new"]
    torch.testing.assert_close(d["new"], x - 1)


def nested_return(x):
    return {"a": [x + 1, (x * 2, None)], "b": 3, "c": (1.5, "s", torch.float32)}


def test_nested_return_structures_mix_constants_and_tensors():
    compiled = check(nested_return, torch.randn(3))
    assert compiled.graph_count == 1


def test_returning_the_same_tensor_twice_uses_one_graph_output():
    def fn(x):
        y = x + 1
        return y, [y]

    compiled = check(fn, torch.randn(2))
    gm = compiled.result.graphs[0].gm
    assert len(list(gm.graph.nodes)[-1].args[0]) == 1
    assert compiled.output[0] is compiled.output[1][0]


# -- guards ----------------------------------------------------------------------------------

def _guards(fn, *args, **kwargs):
    frame = frame_from_call(fn, args, kwargs)
    result = capture(frame, CaptureConfig(fullgraph=True))
    return result, compile_guards(result.guards, fn.__globals__), frame


def uses_only_x(x, unused, flag=True):
    return x + 1


def branches_on_flag(x, flag=True):
    return x + 1 if flag else x - 1


def test_guards_cover_only_what_the_trace_used():
    _, guards_fn, _ = _guards(uses_only_x, torch.randn(2), torch.randn(3))
    text = guards_fn.text
    assert "L['x']" in text
    assert "L['unused']" not in text
    assert "L['flag']" not in text


def test_constant_used_in_a_branch_gets_a_constant_match():
    _, guards_fn, frame = _guards(branches_on_flag, torch.randn(2), flag=True)
    assert "CONSTANT_MATCH: L['flag']" in guards_fn.text
    locals_now = dict(frame.f_locals)
    assert guards_fn(locals_now)
    assert not guards_fn({**locals_now, "flag": False})


def test_tensor_guard_fails_on_a_new_shape_or_dtype():
    _, guards_fn, frame = _guards(uses_only_x, torch.randn(2), torch.randn(3))
    base = dict(frame.f_locals)
    assert guards_fn({**base, "x": torch.randn(2)})
    assert not guards_fn({**base, "x": torch.randn(5)})
    assert not guards_fn({**base, "x": torch.randn(2, dtype=torch.float64)})


def test_global_state_guard_fails_when_grad_mode_changes():
    _, guards_fn, frame = _guards(uses_only_x, torch.randn(2), torch.randn(3))
    with torch.no_grad():
        assert not guards_fn(dict(frame.f_locals))


def test_metadata_only_use_keeps_a_tensor_guard_without_a_graph_input():
    def fn(x, y):
        return y.reshape(x.shape[0], -1)

    result, guards_fn, _ = _guards(fn, torch.randn(2), torch.randn(2, 3))
    assert "TENSOR_MATCH: L['x']" in guards_fn.text
    assert len(result.graphs[0].example_inputs) == 1


def test_called_global_function_gets_an_id_match():
    _, guards_fn, _ = _guards(branches_on_flag, torch.randn(2))
    _, guards_fn2, _ = _guards(lambda x: torch.sin(x), torch.randn(2))
    assert "ID_MATCH: G['torch']" in guards_fn2.text


def test_list_input_gets_a_length_guard():
    def fn(xs):
        return sum(xs)

    _, guards_fn, frame = _guards(fn, [torch.randn(2), torch.randn(2)])
    assert "LENGTH: L['xs']" in guards_fn.text
    assert not guards_fn({"xs": [torch.randn(2)]})


def test_dict_input_gets_a_dict_keys_guard_when_iterated():
    def fn(d):
        return [v * 2 for v in d.values()]

    _, guards_fn, _ = _guards(fn, {"a": torch.randn(2)})
    assert "DICT_KEYS: L['d']" in guards_fn.text
    assert not guards_fn({"d": {"b": torch.randn(2)}})


def test_transformed_code_keeps_the_argument_layout_and_free_variables():
    scale = 2.0

    def fn(a, /, b, *args, c, d=1, **kw):
        return a * scale + b

    result, _, _ = _guards(fn, torch.randn(2), torch.randn(2), 3, c=4, e=5)
    code = result.code
    original = fn.__code__
    assert code.co_argcount == original.co_argcount
    assert code.co_posonlyargcount == original.co_posonlyargcount
    assert code.co_kwonlyargcount == original.co_kwonlyargcount
    assert code.co_varnames[:6] == original.co_varnames[:6]
    assert code.co_freevars == original.co_freevars
    assert code.co_name == original.co_name


def test_transformed_code_runs_with_a_closure_cell_argument():
    def fn(x, k):
        def inner():
            return k * 2

        return x + inner()

    check(fn, torch.randn(2), 3)
    _ = types
    _ = pytest


def _make_stepper():
    count = 0
    total = None

    def step(x):
        nonlocal count, total
        count += 1
        total = x * count
        return total + 1

    return step, lambda: (count, total)


def test_nonlocal_writes_of_the_compiled_frame_are_replayed_into_its_cells():
    step, peek = _make_stepper()
    x = torch.ones(2)
    compiled = run_vm(step, x)
    torch.testing.assert_close(compiled.output, x * 1 + 1)
    count, total = peek()
    assert count == 1
    torch.testing.assert_close(total, x)


def test_an_object_made_inside_and_stored_twice_is_one_object():
    class Box:
        pass

    holder = Holder()

    def fn(x, h):
        shared = [x + 1]
        b = Box()
        b.items = shared
        h.a = b
        h.b = b
        return shared, b

    out, b = run_vm(fn, torch.randn(2), holder).output
    assert holder.a is holder.b is b
    assert b.items is out


def test_a_torch_size_argument_is_guarded_by_value_not_identity():
    def fn(x, shape):
        return x.reshape(shape)

    _, guards_fn, frame = _guards(fn, torch.randn(6), torch.Size([2, 3]))
    x = frame.f_locals["x"]
    assert guards_fn({"x": x, "shape": torch.Size([2, 3])})
    assert not guards_fn({"x": x, "shape": torch.Size([3, 2])})
