"""Compiling and discarding many functions and models keeps memory flat after reset(), and
nothing Strata keeps holds a user's tensors or modules alive after their last use."""

from __future__ import annotations

import gc
import importlib.util
import linecache
import os
import subprocess
import sys
import tracemalloc
import types
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import compile_api


class _Counting:
    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        self.graphs += 1
        return gm.forward


def _module_of_functions(directory: Path, batch: int, count: int) -> types.ModuleType:
    """A fresh module (a real file, so the hook compiles its frames) of ``count`` functions."""
    lines = ["import torch", ""]
    for i in range(count):
        k = batch * count + i
        lines += [f"def f{i}(x):", f"    return torch.sin(x) * {k} + {k % 7}", ""]
    path = directory / f"fns_{batch}.py"
    path.write_text("\n".join(lines))
    spec = importlib.util.spec_from_file_location(f"strata_memory_fns_{batch}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _drop_torch_process_caches() -> None:
    """Empty torch's own process-wide caches that grow with every distinct graph.

    torch.fx keeps each generated forward's source in linecache (for tracebacks), and
    FakeTensorMode keeps a dispatch cache keyed by op and constant arguments; both live for
    the whole process. Dropping them lets the measurement see what Strata itself keeps
    (compile_api.reset() leaves the second: about 7 objects per graph with new constants).
    """
    for key in [k for k in linecache.cache if k.startswith("<eval_with_key>")]:
        del linecache.cache[key]
    FakeTensorMode.cache_clear()


_CHILD = "STRATA_MEMORY_TEST_CHILD"


def _in_own_process(name: str) -> bool:
    """Run test ``name`` of this file in a fresh interpreter; True in that child.

    Under tracemalloc every ``gc.collect()`` walks the whole heap, and in a full test run the
    process holds every collected module (transformers, timm, ...): the hundred-models test took
    376 s there against 46 s alone. A fresh process measures the same thing, faster.
    """
    if os.environ.get(_CHILD) == "1":
        return True
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"{__file__}::{name}"],
        env={**os.environ, _CHILD: "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return False


def _settle(drop_torch_caches: bool = True) -> None:
    compile_api.reset()
    if drop_torch_caches:
        _drop_torch_process_caches()
    gc.collect()
    gc.collect()


def test_thousand_distinct_functions_compiled_and_discarded_keep_memory_flat(
    tmp_path: Path,
) -> None:
    if not _in_own_process(
        "test_thousand_distinct_functions_compiled_and_discarded_keep_memory_flat"
    ):
        return
    batches, per_batch = 10, 100
    backend = _Counting()
    x = torch.linspace(-1, 1, 8)
    dead: list[weakref.ref[Any]] = []
    traced: list[int] = []
    objects: list[int] = []
    tracemalloc.start(1)
    try:
        for batch in range(batches):
            module = _module_of_functions(tmp_path, batch, per_batch)
            for i in range(per_batch):
                fn = getattr(module, f"f{i}")
                assert torch.equal(compile_api.compile(fn, backend=backend)(x), fn(x))
                dead.append(weakref.ref(fn))
            del module, fn
            _settle()
            traced.append(tracemalloc.get_traced_memory()[0])
            objects.append(len(gc.get_objects()) - len(dead))  # not counting our own weakrefs
    finally:
        tracemalloc.stop()
    print(f"after each batch of {per_batch}: traced bytes {traced}, gc objects {objects}")
    assert backend.graphs == batches * per_batch  # every function really compiled
    assert all(ref() is None for ref in dead), "a discarded function is still alive"
    # After the first batches warm up caches (torch's op tables, fx codegen), later batches
    # leave nothing behind: growth over the last 7 batches (700 compiles) stays bounded.
    growth = traced[-1] - traced[2]
    assert growth < 2_000_000, f"traced memory grew {growth} bytes over 700 compiles: {traced}"
    assert objects[-1] - objects[2] < 500, f"gc objects: {objects}"


class _Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.register_buffer("scale", torch.ones(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x)) * self.scale


def test_hundred_models_compiled_and_discarded_keep_memory_flat() -> None:
    if not _in_own_process("test_hundred_models_compiled_and_discarded_keep_memory_flat"):
        return
    backend = _Counting()
    x = torch.randn(3, 8)
    dead: list[weakref.ref[Any]] = []
    traced: list[int] = []
    tracemalloc.start(1)
    try:
        for i in range(100):
            model = _Small()
            compiled = compile_api.compile(model, backend=backend)
            with torch.no_grad():
                assert torch.equal(compiled(x), model(x))
            dead.append(weakref.ref(model))
            del model, compiled
            _settle()
            if i % 10 == 9:
                traced.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    print(f"after every 10 models: traced bytes {traced}")
    assert backend.graphs == 100
    assert all(ref() is None for ref in dead), "a discarded model is still alive"
    growth = traced[-1] - traced[1]
    assert growth < 1_000_000, f"traced memory grew {growth} bytes over 80 models: {traced}"


def _double(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * w + 1


def test_input_tensors_die_after_their_last_use() -> None:
    compiled = compile_api.compile(_double, backend=_Counting())
    x, w = torch.randn(5), torch.randn(5)
    out = compiled(x, w)
    assert torch.equal(out, _double(x, w))
    refs = [weakref.ref(x), weakref.ref(w), weakref.ref(out)]
    del x, w, out
    gc.collect()
    # The compiled entry stays cached (no reset): it must not hold the example inputs.
    assert [r() is None for r in refs] == [True, True, True]
    y = torch.randn(5)
    assert torch.equal(compiled(y, y), _double(y, y))


def test_model_and_its_parameters_die_after_del_reset_and_gc() -> None:
    model = _Small()
    compiled = compile_api.compile(model, backend=_Counting())
    x = torch.randn(2, 8)
    with torch.no_grad():
        assert torch.equal(compiled(x), model(x))
    refs = [weakref.ref(model), weakref.ref(model.fc.weight), weakref.ref(model.scale)]
    del model, compiled
    _settle()
    assert [r() is None for r in refs] == [True, True, True]


_GLOBAL_WEIGHT: torch.Tensor | None = None


def _uses_global(x: torch.Tensor) -> torch.Tensor:
    assert _GLOBAL_WEIGHT is not None
    return x + _GLOBAL_WEIGHT


def test_global_tensor_rebound_dies_after_reset_and_gc() -> None:
    global _GLOBAL_WEIGHT
    _GLOBAL_WEIGHT = torch.randn(4)
    compiled = compile_api.compile(_uses_global, backend=_Counting())
    x = torch.randn(4)
    assert torch.equal(compiled(x), _uses_global(x))
    ref = weakref.ref(_GLOBAL_WEIGHT)
    _GLOBAL_WEIGHT = torch.randn(4)
    assert torch.equal(compiled(x), _uses_global(x))
    _settle()
    assert ref() is None
    _GLOBAL_WEIGHT = None

