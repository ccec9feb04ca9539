"""Per-call cost of a compiled guard check (guards package), side by side with a trivial
``lambda L: True`` and torch.compile(backend="eager")'s whole per-call overhead.

    .venv/bin/python benchmarks/guards_overhead.py [--number N] [--repeat R] [--no-torch-compile]
        [--e2e-only] [--model tv_mobilenet_v3_small]

Cases:
  (a) one tensor argument: TENSOR_MATCH (+ the DISPATCH_TLS it implies), then the same
      plus GLOBAL_STATE, plus ablations that show where the time goes;
  (b) a module with 50 parameters: ID_MATCH on the module, CONSTANT_MATCH on .training,
      DICT_KEYS on ._modules, TENSOR_MATCH on two tensor args, GLOBAL_STATE;
  (b') the same plus TENSOR_MATCH on each of the 50 parameters (symbolic_vm lifts parameters
      as graph inputs and guards each), with TYPE_MATCH on the submodules read through;
  (b'') as (b') with the parameters read through the modules' _modules/_parameters dicts.
  (--model NAME) a real model's whole guard (mobilenet_v3_small: ~1,200 guards), with and
      without guards' state trees, beside torch.compile's own guard check (see model_rows).
References (run side by side, never used by the package): TorchDynamo's own cached guard
check for the same frame (its C++ GuardManager, through its Python ``check``), and
torch.compile(backend="eager")'s whole per-call overhead (compiled call - eager call; for (b)
this is negative, since the compiled graph skips 26 nn.Module.__call__s).
End to end (--e2e, the issue's target): the whole per-call overhead of a compiled function over
calling its compiled graph directly, for compile_api.compile(backend=<graph grabber>) and for
torch.compile(backend=<graph grabber>) (the grabber returns gm.forward, as backend="eager"
does, and keeps the graph and its example inputs so the graph can be called directly), with
Strata's split: its guard check alone, and its call under evalframe.run_only() (evalframe's
dispatch + guard + transformed code, without compile_api's wrapper).
Guard-only rows are timed on both check paths of the guards package: "C++" (its compiled
extension, the default when built) and "Python" (STRATA_GUARDS_PURE_PYTHON=1); end-to-end rows
compile once per path too.
Every figure is the median (and the min) over R repeats of (CPU time of N calls) / N, in ns.
torch.compile's overhead is median(compiled call) - median(eager call) of the same function.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import time
import timeit
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from guards import (
    AttrSource,
    CompiledGuards,
    GuardSet,
    ItemSource,
    LocalSource,
    Source,
    compile_guards,
)

PURE_PYTHON_ENV = "STRATA_GUARDS_PURE_PYTHON"  # guards' switch to its pure-Python check path
PATHS = ("C++", "Python")


@contextlib.contextmanager
def check_path(path: str) -> Iterator[None]:
    """Compile guards on ``path`` ("C++" or "Python") inside the block."""
    old = os.environ.pop(PURE_PYTHON_ENV, None)
    if path == "Python":
        os.environ[PURE_PYTHON_ENV] = "1"
    try:
        yield
    finally:
        os.environ.pop(PURE_PYTHON_ENV, None)
        if old is not None:
            os.environ[PURE_PYTHON_ENV] = old


def compile_on(path: str, gs: GuardSet) -> CompiledGuards:
    """compile_guards on the given path; the C++ path must really be C++ (else it says so)."""
    with check_path(path):
        cg = compile_guards(gs, {})
    native = "_check_" in cg.source_code
    if native != (path == "C++"):
        raise SystemExit(f"the {path} path compiled to:\n{cg.source_code}(is the extension built?)")
    return cg


# CPU time of this process: on a shared, oversubscribed machine wall time mostly measures
# the neighbours.  (torch runs single-threaded below, so this is the time of one thread.)
TIMER = time.process_time


def per_call_ns(
    fn: Callable[..., object], args: tuple[object, ...], number: int, repeat: int
) -> tuple[float, float]:
    times = timeit.repeat(
        "fn(*args)", globals={"fn": fn, "args": args}, number=number, repeat=repeat, timer=TIMER
    )
    return _summary(times, number)


def _summary(times: list[float], number: int) -> tuple[float, float]:
    per_call = [t / number * 1e9 for t in times]
    return statistics.median(per_call), min(per_call)


def check_ns(
    check: Callable[[dict[str, object]], bool],
    f_locals: dict[str, object],
    number: int,
    repeat: int,
) -> tuple[float, float]:
    assert check(f_locals) is True
    times = timeit.repeat(
        "check(L)",
        globals={"check": check, "L": f_locals},
        number=number,
        repeat=repeat,
        timer=TIMER,
    )
    return _summary(times, number)


def dynamo_check_ns(
    fn: Callable[..., object], f_locals: dict[str, object], number: int, repeat: int
) -> tuple[float, float]:
    """Reference only: time the guard check TorchDynamo cached for ``fn``'s code."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    (entry,) = _debug_get_cache_entry_list(fn.__code__)  # type: ignore[attr-defined]
    return check_ns(entry.guard_manager.check, f_locals, number, repeat)


def ablate(cg: CompiledGuards, drop: list[str]) -> Callable[[dict[str, object]], bool]:
    """cg's generated function without the check lines mentioning any of ``drop``."""
    fn: Any = cg.check
    lines = cg.source_code.splitlines()
    kept = [ln for ln in lines if ln.startswith("def ") or not any(d in ln for d in drop)]
    ns: dict[str, object] = dict(fn.__globals__)
    exec("\n".join(kept), ns)
    return ns["___guard_check"]  # type: ignore[return-value]


def ablate_where(
    cg: CompiledGuards, drop: Callable[[str], bool]
) -> Callable[[dict[str, object]], bool]:
    """cg's generated function without the lines for which ``drop`` is true."""
    fn: Any = cg.check
    kept = [ln for ln in cg.source_code.splitlines() if ln.startswith("def ") or not drop(ln)]
    ns: dict[str, object] = dict(fn.__globals__)
    exec("\n".join(kept), ns)
    return ns["___guard_check"]  # type: ignore[return-value]


def _parameter_metadata_line(line: str) -> bool:
    # MODULE_PARAMS names parameter locals p<N>; their identity lines hold "is not ___ref".
    return bool(re.search(r"\bp\d+\b", line)) and "___ref" not in line and " = " not in line


def _attr_path(name: str) -> str:
    """``layers.3.weight`` -> ``m.layers[3].weight`` (how the module's own code reads it)."""
    out = "m"
    for part in name.split("."):
        out += f"[{part}]" if part.isdigit() else f".{part}"
    return out


def _dict_path(name: str) -> str:
    """``layers.3.weight`` -> ``m._modules['layers']._modules['3']._parameters['weight']``."""
    *mods, leaf = name.split(".")
    return "m" + "".join(f"._modules[{p!r}]" for p in mods) + f"._parameters[{leaf!r}]"


def _tuple_reader(exprs: list[str]) -> Callable[[torch.nn.Module], tuple[object, ...]]:
    ns: dict[str, object] = {}
    exec(f"def read(m):\n    return ({', '.join(exprs)},)\n", ns)
    return ns["read"]  # type: ignore[return-value]


def module_guard_sets(
    model: torch.nn.Module, lb: dict[str, object], x: torch.Tensor, y: torch.Tensor
) -> tuple[GuardSet, GuardSet, GuardSet, GuardSet]:
    """The guard sets of case (b), (b'), (b'') and (b) + MODULE_PARAMS (see the docstring)."""

    def base(with_id: bool) -> GuardSet:
        gs = GuardSet()
        if with_id:
            gs.ID_MATCH(LocalSource("self"), model)
        gs.CONSTANT_MATCH(AttrSource(LocalSource("self"), "training"), True)
        gs.DICT_KEYS(AttrSource(LocalSource("self"), "_modules"), model._modules)
        gs.TENSOR_MATCH(LocalSource("x"), x)
        gs.TENSOR_MATCH(LocalSource("y"), y)
        gs.GLOBAL_STATE()
        return gs

    gb = base(True)
    # (b'): a TENSOR_MATCH on each of the 50 parameters, read through the module, which is
    # what symbolic_vm emitted before MODULE_PARAMS when it lifted parameters as graph inputs.
    gb_params = base(True)
    for name, _ in model.named_parameters():
        source: Source = LocalSource("self")
        for part in name.split("."):
            source = AttrSource(source, part)
        gb_params.TENSOR_MATCH(source, model.get_parameter(name))
    gb_params.add_base_guards(lb, {})
    # (b''): the same guards, each parameter read through the module's own dicts
    # (L['self']._modules['layers']._modules['0']._parameters['weight']): no
    # nn.Module.__getattr__ (a Python function) per step.
    gd = base(True)
    for name, _ in model.named_parameters():
        *mods, leaf = name.split(".")
        source = LocalSource("self")
        for part in mods:
            source = ItemSource(AttrSource(source, "_modules"), part)
        gd.TENSOR_MATCH(
            ItemSource(AttrSource(source, "_parameters"), leaf), model.get_parameter(name)
        )
    gd.add_base_guards(lb, {})
    # MODULE_PARAMS: one guard on the module tree that reads every parameter through
    # _modules/_parameters, checks the identity of each submodule and parameter, and the full
    # TENSOR_MATCH metadata of each parameter.
    gp = base(False)
    gp.MODULE_PARAMS(LocalSource("self"), model, [name for name, _ in model.named_parameters()])
    return gb, gb_params, gd, gp


def vm_guard_records(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> Any:
    """The guard records and globals symbolic_vm emits for ``model(x, y)`` (via compile_api;
    the caller resets compile_api after use: the guards' SHAPE lines read globals it installed)."""
    import compile_api
    import evalframe

    compile_api.compile(model, backend="eager")(x, y)
    entries = evalframe.cache_entries(Model.forward.__code__)
    if len(entries) != 1:
        return None
    cg: Any = getattr(entries[0].guard, "compiled_guards", entries[0].guard)
    return cg.guards, cg.f_globals


def vm_set(records: Any) -> tuple[GuardSet, dict[str, Any]]:
    """A GuardSet of the ``records`` symbolic_vm emitted (MODULE_CALLS included)."""
    guards, f_globals = records
    gs = GuardSet()
    for guard in guards:
        gs.add(guard)
    return gs, f_globals


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(25)])

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.layers(x) + y
        return out


def one_tensor_fn(x: torch.Tensor) -> torch.Tensor:
    return x + 1


class GraphGrabber:
    """A backend that runs each graph as is (like backend="eager") and keeps it to call directly."""

    def __init__(self) -> None:
        self.forwards: list[Callable[..., object]] = []
        self.inputs: list[list[object]] = []

    def __call__(
        self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
    ) -> Callable[..., Any]:
        self.forwards.append(gm.forward)
        self.inputs.append(list(example_inputs))
        return gm.forward


def end_to_end(n: int, r: int, with_torch_compile: bool) -> list[tuple[str, tuple[float, float]]]:
    """Whole per-call overhead: compiled call - direct call of the compiled graph."""
    import compile_api
    import evalframe

    rows: list[tuple[str, tuple[float, float]]] = []
    x, y = torch.randn(8, 8), torch.randn(8, 8)
    model = Model()
    cases: list[tuple[str, Callable[..., object], tuple[object, ...], object, int]] = [
        ("(a) x + 1", one_tensor_fn, (x,), one_tensor_fn.__code__, n),
        ("(b) 50-parameter module", model, (x, y), Model.forward.__code__, n // 10),
    ]
    for (label0, fn, args, code, number), path in [(c, p) for c in cases for p in PATHS]:
        label = f"{label0} [{path}]"
        grab = GraphGrabber()
        compiled = compile_api.compile(fn, backend=grab)
        with check_path(path):
            compiled(*args)
        compiled(*args)
        assert len(grab.forwards) == 1, "one graph, no recompile"
        graph_call = per_call_ns(grab.forwards[0], tuple(grab.inputs[0]), number, r)
        whole = per_call_ns(compiled, args, number, r)
        (entry,) = evalframe.cache_entries(code)  # type: ignore[arg-type]
        names = code.co_varnames[: code.co_argcount]  # type: ignore[attr-defined]
        f_locals = dict(zip(names, (model, *args) if names[0] == "self" else args, strict=True))
        guard_only = check_ns(entry.guard, f_locals, number, r)
        with evalframe.run_only():
            hooked = per_call_ns(fn, args, number, r)
        rows.append((f"{label}: Strata compiled call", whole))
        rows.append((f"{label}: its graph called directly", graph_call))
        rows.append((f"{label}: **Strata overhead** (compiled - graph)", _minus(whole, graph_call)))
        rows.append((f"{label}:   of which the guard check", guard_only))
        rows.append((f"{label}:   of which compile_api's wrapper", _minus(whole, hooked)))
        rows.append(
            (
                f"{label}:   of which evalframe + transformed code (run_only - graph - guard)",
                _minus(_minus(hooked, graph_call), guard_only),
            )
        )
        if with_torch_compile and path == PATHS[-1]:
            label = label0
            torch._dynamo.reset()
            tgrab = GraphGrabber()
            tcompiled = torch.compile(fn, backend=tgrab)
            tcompiled(*args)
            tcompiled(*args)
            tgraph = per_call_ns(tgrab.forwards[0], tuple(tgrab.inputs[0]), number, r)
            twhole = per_call_ns(tcompiled, args, number, r)
            rows.append((f"{label}: torch.compile call", twhole))
            rows.append((f"{label}: its graph called directly", tgraph))
            rows.append(
                (f"{label}: **torch.compile overhead** (compiled - graph)", _minus(twhole, tgraph))
            )
            torch._dynamo.reset()
        compile_api.reset()
    return rows


def _minus(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    return a[0] - b[0], a[1] - b[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--no-torch-compile", action="store_true")
    parser.add_argument("--e2e-only", action="store_true", help="only the end-to-end rows")
    parser.add_argument(
        "--model", default=None, help="only the guard of this model's forward (see model_rows)"
    )
    opts = parser.parse_args()
    n, r = opts.number, opts.repeat
    torch.set_num_threads(1)
    if opts.model is not None:
        _print(model_rows(opts.model, n, r, not opts.no_torch_compile), n, r)
        return
    rows: list[tuple[str, tuple[float, float]]] = []
    e2e_rows = end_to_end(n, r, not opts.no_torch_compile)
    if opts.e2e_only:
        _print(e2e_rows, n, r)
        return

    trivial = lambda L: True  # noqa: E731
    x = torch.randn(8, 8)
    la: dict[str, object] = {"x": x}
    rows.append(("trivial `lambda L: True`", check_ns(trivial, la, n, r)))

    gs = GuardSet()
    gs.TENSOR_MATCH(LocalSource("x"), x)
    gs_state = GuardSet()
    gs_state.TENSOR_MATCH(LocalSource("x"), x)
    gs_state.GLOBAL_STATE()
    model = Model()
    y = torch.randn(8, 8)
    lb = {"self": model, "x": x, "y": y}
    assert sum(1 for _ in model.parameters()) == 50
    gb, gb_params, gd, gp = module_guard_sets(model, lb, x, y)
    cgb_text = ""
    for path in PATHS:
        cg = compile_on(path, gs)
        cg_gs = compile_on(path, gs_state)
        # Ablations (not shipped modes): the same generated check with lines removed, to show
        # where the time goes; called as the plain function (compare with the .check rows).
        rows.append(
            (
                f"(a) [{path}] TENSOR_MATCH x alone (ablation: DISPATCH_TLS removed)",
                check_ns(ablate(cg, ["tls_"]), la, n, r),
            )
        )
        rows.append((f"(a) [{path}] TENSOR_MATCH x + DISPATCH_TLS", check_ns(cg, la, n, r)))
        rows.append(
            (
                f"(a) [{path}] TENSOR_MATCH x + DISPATCH_TLS + GLOBAL_STATE",
                check_ns(cg_gs, la, n, r),
            )
        )
        rows.append(
            (
                f"(a) [{path}] the same via .check (plain function)",
                check_ns(cg_gs.check, la, n, r),
            )
        )
        if path == "Python":
            rows.append(
                (
                    "(a) [Python] ablation: without DISPATCH_TLS and tensor dispatch keys",
                    check_ns(ablate(cg, ["tls_", "dispatch_keys"]), la, n, r),
                )
            )
        cgb = compile_on(path, gb)
        if path == "C++":
            cgb_text = cgb.source_code
        rows.append(
            (
                f"(b) [{path}] module: ID+CONSTANT+DICT_KEYS+2xTENSOR+GLOBAL_STATE",
                check_ns(cgb, lb, n, r),
            )
        )
        rows.append(
            (
                f"(b') [{path}] as (b) + TENSOR_MATCH on the 50 parameters",
                check_ns(compile_on(path, gb_params), lb, n // 10, r),
            )
        )
        rows.append(
            (
                f"(b'') [{path}] as (b'), parameters read via _modules/_parameters",
                check_ns(compile_on(path, gd), lb, n // 10, r),
            )
        )
        cgp = compile_on(path, gp)
        rows.append(
            (
                f"(b) [{path}] (b) + MODULE_PARAMS (identity + full metadata of 50 parameters)",
                check_ns(cgp, lb, n // 10, r),
            )
        )
        if path == "Python":
            rows.append(
                (
                    "(b) [Python] ablation, NOT sound: MODULE_PARAMS identity only (no metadata)",
                    check_ns(ablate_where(cgp, _parameter_metadata_line), lb, n // 10, r),
                )
            )

    # MODULE_CALLS: the 25 called Linear modules under self.layers._modules alone, and the
    # whole guard symbolic_vm emits for (b) (one MODULE_CALLS per _modules dict in it).
    layers = AttrSource(
        ItemSource(AttrSource(LocalSource("self"), "_modules"), "layers"), "_modules"
    )
    calls = [(k, type(m), type(m).forward) for k, m in model.layers._modules.items()]
    gm = GuardSet()
    gm.MODULE_CALLS(layers, calls)
    vm_guards = vm_guard_records(model, x, y)
    for path in PATHS:
        rows.append(
            (
                f"(b) [{path}] MODULE_CALLS alone: 25 called Linear modules",
                check_ns(compile_on(path, gm), lb, n // 10, r),
            )
        )
        if vm_guards is None:
            continue
        with check_path(path):
            vm_cg = compile_guards(*vm_set(vm_guards))
        assert "MODULE_CALLS" in vm_cg.text
        rows.append((f"(b) [{path}] the guard symbolic_vm emits", check_ns(vm_cg, lb, n // 10, r)))
    import compile_api

    compile_api.reset()

    # What the transformed code pays to read the 50 parameters it passes to the graph: the
    # attribute path symbolic_vm reads them by today, and the dict path MODULE_PARAMS reads.
    names = [name for name, _ in model.named_parameters()]
    by_attr = _tuple_reader([_attr_path(name) for name in names])
    by_dict = _tuple_reader([_dict_path(name) for name in names])
    assert by_attr(model) == by_dict(model)
    rows.append(
        (
            "(b) reading the 50 parameters as self.layers[i].weight",
            per_call_ns(by_attr, (model,), n // 10, r),
        )
    )
    rows.append(
        (
            "(b) reading them as self._modules[..]._parameters[..]",
            per_call_ns(by_dict, (model,), n // 10, r),
        )
    )

    if not opts.no_torch_compile:
        # Reference only: torch.compile runs here as the yardstick, never in the package.
        torch._dynamo.reset()
        compiled_a = torch.compile(one_tensor_fn, backend="eager")
        compiled_a(x)
        rows.append(
            ("(a) torch.compile's own guard check", dynamo_check_ns(one_tensor_fn, la, n, r))
        )
        eager_a = per_call_ns(one_tensor_fn, (x,), n, r)
        comp_a = per_call_ns(compiled_a, (x,), n, r)
        rows.append(
            (
                "(a) torch.compile(eager) x+1: compiled call - eager call",
                (comp_a[0] - eager_a[0], comp_a[1] - eager_a[1]),
            )
        )
        compiled_b = torch.compile(model, backend="eager")
        compiled_b(x, y)
        rows.append(
            ("(b) torch.compile's own guard check", dynamo_check_ns(Model.forward, lb, n, r))
        )
        eager_b = per_call_ns(model, (x, y), n // 10, r)
        comp_b = per_call_ns(compiled_b, (x, y), n // 10, r)
        rows.append(
            (
                "(b) torch.compile(eager) module: compiled call - eager call",
                (comp_b[0] - eager_b[0], comp_b[1] - eager_b[1]),
            )
        )
        rows.append(("    (b) eager module call itself", eager_b))

    _print(e2e_rows + rows, n, r)
    print()
    print(
        "generated check for (b), C++ path:"
        if "_check_" in cgb_text
        else "generated check for (b):"
    )
    print(cgb_text)


def model_rows(
    name: str, n: int, r: int, with_torch_compile: bool
) -> list[tuple[str, tuple[float, float]]]:
    """The guard of a real model's forward (``--model``, a name of benchmarks/
    inductor_cpu_models.py, batch 1 at 96x96, eval, no_grad), captured by compile_api with a
    graph-grabbing backend, timed on: the C++ path with state trees (the default), the C++ path
    without them (``STRATA_GUARDS_STATE_TREES=0``), the pure-Python path; and torch.compile's
    own guard check of the same forward (reference)."""
    import collections

    from inductor_cpu_models import build_with_inputs

    import compile_api
    import evalframe

    model, inputs = build_with_inputs(name, 96)
    model.eval()
    torch.set_grad_enabled(False)
    compiled = compile_api.compile(model, backend=lambda gm, example_inputs: gm.forward)
    compiled(*inputs)
    entry = evalframe.cache_entries(type(model).forward.__code__)[0]
    cg: CompiledGuards = entry.guard.compiled_guards  # type: ignore[attr-defined]
    code = type(model).forward.__code__
    f_locals: dict[str, object] = dict(zip(code.co_varnames, (model, *inputs), strict=False))
    kinds = collections.Counter(g.kind for g in cg.guards)
    top = ", ".join(f"{k} {v}" for k, v in kinds.most_common(4))
    rows: list[tuple[str, tuple[float, float]]] = []
    variants = [("C++, state trees", "C++", None), ("C++, no state trees", "C++", "0")]
    variants.append(("pure Python", "Python", "0"))
    for label, path, trees in variants:
        old = os.environ.pop("STRATA_GUARDS_STATE_TREES", None)
        if trees is not None:
            os.environ["STRATA_GUARDS_STATE_TREES"] = trees
        try:
            with check_path(path):
                variant = CompiledGuards(cg.guards, cg.f_globals)
        finally:
            os.environ.pop("STRATA_GUARDS_STATE_TREES", None)
            if old is not None:
                os.environ["STRATA_GUARDS_STATE_TREES"] = old
        timed = check_ns(variant.check, f_locals, max(n // 100, 10), r)
        rows.append((f"{name} [{label}]: {len(cg.guards)} guards ({top}, ...)", timed))
    if with_torch_compile:
        torch._dynamo.reset()
        torch.compile(model, backend="eager")(*inputs)
        fn: Any = type(model).forward
        rows.append((f"{name}: torch.compile's own guard check", dynamo_check_ns(
            fn, f_locals, max(n // 100, 10), r)))
    compile_api.reset()
    return rows


def _print(rows: list[tuple[str, tuple[float, float]]], n: int, r: int) -> None:
    print(
        f"torch {torch.__version__}; process CPU time; median and min of {r} repeats "
        f"x {n} calls (n/10 for (b)); ns per call; load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} CPUs"
    )
    print("| case | median ns/call | min ns/call |")
    print("| --- | ---: | ---: |")
    for name, (med, low) in rows:
        print(f"| {name} | {med:.0f} | {low:.0f} |")


if __name__ == "__main__":
    main()
