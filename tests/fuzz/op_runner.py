"""The op family's runner: a program of ``op_families`` on inductor_lite vs eager.

Each program runs 3 calls (value set 0, set 0 again: a cache hit, set 1: new values, same
shapes) eagerly and compiled (``compile_api.compile(fn, backend=compile_fx)`` with inductor_lite
set to raise instead of falling back, and compile_api's ``suppress_errors`` off, so a crash shows
as a crash), each on fresh inputs. Observed per call: every output, every argument after the call
(in-place writes, also through views), and where the program has ``REQUIRES_GRAD`` arguments the
gradients of a backward through a fixed random weighting of the outputs that require grad.

Tolerance. Integers and booleans must be equal; NaN must be where eager has NaN and +-inf where
eager has it. A float that differs from eager by more than the dtype's rounding
(``|c - e| <= r * (|e| + 0.1 * max(1, max|e|))``, r from ``RTOL``) is checked against a float64
run of the same program (float arguments promoted): it passes where its error from float64 is
at most 3x eager's plus that rounding. r is that of the least precise float dtype the program
names (a float64 output of a float32 softmax holds float32's rounding). What is still left is
then held against ``torch.compile`` (torch inductor) on the same program: a difference is
reported only where ours is further from the float64 result than 3x the worse of eager and
torch.compile (and, for
integers and booleans, only where torch.compile gives eager's values and we do not). So
rounding noise that torch.compile shows too (a float16 intermediate kept in float32, a
reassociated sum, a floor of a value one ulp from an integer) never fails a program.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import os
import tempfile
import types
import warnings
from collections.abc import Callable
from typing import Any

import torch

if not torch.cuda.is_available():  # the Triton share runs through Triton's interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")
# The Triton share's inputs are CPU tensors: it runs through Triton's interpreter, and on a
# machine with a GPU (where the interpreter is off) it is not run: a real Triton kernel cannot
# read CPU memory. inductor_lite's own test_triton* files cover the GPU.
TRITON_SHARE_RUNS = os.environ.get("TRITON_INTERPRET") == "1"

import compile_api  # noqa: E402
from inductor_lite import InductorConfig, compile_fx  # noqa: E402

from .op_inputs import DTYPES, Spec, make_inputs  # noqa: E402

__all__ = ["OpFailure", "check_op_source", "eager_problem", "load_program"]

RTOL = {torch.float64: 1e-9, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
CALL_SETS = (0, 0, 1)
_COUNTER = itertools.count()
_TMPDIR: list[str] = []


@dataclasses.dataclass
class OpFailure:
    """The first real difference found in one program."""

    call: int
    kind: str  # "value", "raised", "backward", "shape", "no_graph", "eager_raised"
    where: str
    detail: str

    def __str__(self) -> str:
        return f"call {self.call}: {self.kind} at {self.where}: {self.detail}"

    @property
    def signature(self) -> tuple[str, str]:
        head = self.detail.split(":")[0][:60] if self.kind in ("raised", "backward") else ""
        return (self.kind, head)


def load_program(source: str) -> types.ModuleType:
    """``source`` written to a real file and loaded as a fresh module (own code objects)."""
    if not _TMPDIR:
        _TMPDIR.append(tempfile.mkdtemp(prefix="strata-opfuzz-"))
    path = os.path.join(_TMPDIR[0], f"opprog_{next(_COUNTER)}.py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(f"opprog_{next(_COUNTER)}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _weights(t: torch.Tensor, k: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + k)
    return torch.randn(t.shape, generator=g, dtype=torch.float64)


def _observe(
    fn: Callable[..., Any], module: types.ModuleType, call_set: int, float64: bool = False
) -> dict[str, Any]:
    """Outputs, arguments after the call and gradients of one call (or ``{"raised": exc}``)."""
    specs: list[Spec] = module.INPUTS
    grads: tuple[int, ...] = module.REQUIRES_GRAD
    inputs = make_inputs(specs, module.SEED, call_set)
    if float64:
        inputs = [t.double() if t.is_floating_point() else t for t in inputs]
    inputs = [t.detach().requires_grad_(True) if i in grads else t for i, t in enumerate(inputs)]
    saved = torch.get_default_dtype()
    if float64:  # integers promoted to floats (xlogy of an int64) promote to float64 too
        torch.set_default_dtype(torch.float64)
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            obs = _call_and_backward(fn, inputs, grads)
    finally:
        torch.set_default_dtype(saved)
    fallbacks = [str(w.message) for w in seen if str(w.message).startswith("inductor_lite:")]
    if fallbacks:  # a kernel failed at run time and the graph ran eagerly instead
        obs["fallback"] = fallbacks[0]
    return obs


def _call_and_backward(
    fn: Callable[..., Any], inputs: list[torch.Tensor], grads: tuple[int, ...]
) -> dict[str, Any]:
    obs: dict[str, Any] = {}
    try:
        outs = fn(*inputs)
    except Exception as exc:
        return {"raised": exc}
    for i, o in enumerate(outs):
        obs[f"out[{i}]"] = o.detach().clone()
    for i, t in enumerate(inputs):
        obs[f"arg[{i}]"] = t.detach().clone()
    if grads:
        terms = [
            (o.double() * _weights(o, i)).sum()
            for i, o in enumerate(outs)
            if o.requires_grad and o.is_floating_point()
        ]
        if terms:
            leaves = [inputs[i] for i in grads]
            try:
                got = torch.autograd.grad(sum(terms), leaves, allow_unused=True)
            except Exception as exc:
                return {**obs, "backward_raised": exc}
            for i, gr in zip(grads, got):
                obs[f"grad[{i}]"] = None if gr is None else gr.clone()
    return obs


def _float_problem(
    c: torch.Tensor,
    e: torch.Tensor,
    ref: torch.Tensor | None,
    other: torch.Tensor | None,
    floor: float = 0.0,
) -> str | None:
    """Why ``c`` (compiled) is not ``e`` (eager) up to rounding; None when it is."""
    r = max(RTOL.get(e.dtype, 1e-5), floor)
    e64, c64 = e.double(), c.double()
    special = _special_mismatch(c64, e64)
    if special.any() and other is not None and other.shape == e.shape:
        # where torch.compile also has NaN/inf for eager's finite value (or the reverse), it is
        # the rounding of a value at an edge (x - mean == 0 times -inf)
        special &= ~_special_mismatch(other.double(), e64)
    if special.any():
        k = int(special.reshape(-1).nonzero()[0, 0])
        return (
            f"NaN/inf at other places ({int(special.sum())} elements); first: compiled "
            f"{float(c64.reshape(-1)[k])!r} eager {float(e64.reshape(-1)[k])!r}"
        )
    fin = e64.isfinite() & c64.isfinite()
    e64, c64 = e64[fin], c64[fin]
    if e64.numel() == 0:
        return None
    scale = 0.1 * max(1.0, float(e64.abs().max()))
    tol = r * (e64.abs() + scale)
    bad = (c64 - e64).abs() > tol
    if not bad.any():
        return None
    if ref is not None and ref.shape == e.shape:
        ref64 = ref.double()[fin]
        ok_ref = ref64.isfinite()
        allowance = 3 * (e64 - ref64).abs() + tol
        if other is not None and other.shape == e.shape:
            allowance = torch.maximum(allowance, 3 * (other.double()[fin] - ref64).abs() + tol)
        bad = bad & ~(ok_ref & ((c64 - ref64).abs() <= allowance))
    elif other is not None and other.shape == e.shape:
        bad = bad & ((c64 - e64).abs() > 3 * (other.double()[fin] - e64).abs() + tol)
    if not bad.any():
        return None
    k = int(bad.nonzero()[0, 0])
    return (
        f"{int(bad.sum())} of {e64.numel()} elements differ ({e.dtype}); first: compiled "
        f"{float(c64[k])!r} eager {float(e64[k])!r}"
        + (
            f" float64 {float(ref.double()[fin][k])!r}"
            if ref is not None and ref.shape == e.shape
            else ""
        )
    )


def _special_mismatch(c64: torch.Tensor, e64: torch.Tensor) -> torch.Tensor:
    """Elements where one is NaN and the other is not, or an infinity differs."""
    nan = e64.isnan() != c64.isnan()
    inf = (e64.isinf() | c64.isinf()) & (e64 != c64) & ~(e64.isnan() & c64.isnan())
    return nan | inf


def _precision_floor(source: str) -> float:
    """The rounding of the least precise float dtype the program computes in: a float64
    output computed through a float32 softmax holds float32's rounding, not float64's."""
    return max(
        (RTOL[dt] for name, dt in DTYPES.items() if dt.is_floating_point and name in source),
        default=0.0,
    )


def _problem(c: Any, e: Any, ref: Any, other: Any, floor: float = 0.0) -> str | None:
    if c is None or e is None:
        return (
            None if c is None and e is None else f"gradient None vs a tensor (compiled {c is None})"
        )
    if c.shape != e.shape or c.dtype != e.dtype:
        return f"shape/dtype {tuple(c.shape)} {c.dtype} vs eager {tuple(e.shape)} {e.dtype}"
    if e.is_floating_point():
        return _float_problem(c, e, ref, other, floor)
    if torch.equal(c, e):
        return None
    if other is not None and other.shape == e.shape and not torch.equal(other, e):
        # torch.compile differs from eager too (a comparison of a value near a rounding edge)
        if int((c != e).sum()) <= 3 * int((other != e).sum()):
            return None
    k = int((c != e).reshape(-1).nonzero()[0, 0])
    first = f"compiled {c.reshape(-1)[k].item()} eager {e.reshape(-1)[k].item()}"
    return f"{int((c != e).sum())} of {e.numel()} differ ({e.dtype}); first: {first}"


def _backend(codegen: str, counter: list[int]) -> Callable[..., Any]:
    config = InductorConfig(fallback="raise", codegen=codegen)  # type: ignore[arg-type]

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        counter[0] += 1
        return compile_fx(gm, list(example_inputs), config=config)

    return backend


def _torch_compiled(source: str) -> Callable[..., Any] | None:
    import torch._dynamo

    torch._dynamo.reset()
    module = load_program(source)
    return torch.compile(module.fn, backend="inductor")  # type: ignore[no-any-return]


# A compile that says it cannot (and runs eagerly under the default suppress_errors): not a
# wrong result. aot's documented refusals, an input written through an overlapping view, and
# the Triton ops inductor_lite does not generate yet (inductor_lite's README, "Missing").
DECLINED = (
    "AotUnsupportedError",
    "refers to a single memory location",
    "no Triton lowering",
    "no Triton reduction",
)


def _declined(exc: BaseException) -> bool:
    return any(text in str(exc) for text in DECLINED)


def eager_problem(source: str) -> str | None:
    """Why ``source`` is not a valid program (raises or is not deterministic eagerly)."""
    module = load_program(source)
    for call_set in (0, 1):
        first = _observe(module.fn, module, call_set)
        if "raised" in first or "backward_raised" in first:
            return repr(first.get("raised") or first.get("backward_raised"))
        again = _observe(module.fn, module, call_set)
        for key, value in first.items():
            if isinstance(value, torch.Tensor) and not torch.equal(
                value.nan_to_num(), again[key].nan_to_num()
            ):
                return f"{key} differs between two eager runs"
    return None


def check_op_source(
    source: str,
    stats: dict[str, int] | None = None,
    yardstick: bool = True,
    backend: Callable[..., Any] | None = None,
) -> OpFailure | None:
    """Run ``source`` eagerly and compiled with inductor_lite (or ``backend``, wrapped as
    ``backend(inductor_lite_backend)``: the runner's own tests); the first real difference."""
    stats = stats if stats is not None else {}
    eager_module, compiled_module = load_program(source), load_program(source)
    if compiled_module.CODEGEN == "triton" and not TRITON_SHARE_RUNS:
        stats["declined"] = stats.get("declined", 0) + 1
        return None
    counter = [0]
    saved = compile_api.config.suppress_errors
    compile_api.config.suppress_errors = False
    compile_api.reset()
    try:
        chosen = _backend(compiled_module.CODEGEN, counter)
        compiled = compile_api.compile(
            compiled_module.fn, backend=backend(chosen) if backend else chosen
        )
        reference: Callable[..., Any] | None = None
        floor = _precision_floor(source)
        for call, call_set in enumerate(CALL_SETS):
            e = _observe(eager_module.fn, eager_module, call_set)
            c = _observe(compiled, compiled_module, call_set)
            if "raised" in e:
                return OpFailure(call, "eager_raised", "fn", repr(e["raised"])[:300])
            if "raised" in c and _declined(c["raised"]):
                stats["declined"] = stats.get("declined", 0) + 1
                return None
            if "raised" in c:
                return OpFailure(
                    call, "raised", "fn", f"{type(c['raised']).__name__}: {c['raised']}"[:600]
                )
            if "backward_raised" in c and "backward_raised" not in e:
                exc = c["backward_raised"]
                return OpFailure(call, "backward", "grad", f"{type(exc).__name__}: {exc}"[:600])
            if "fallback" in c:
                return OpFailure(call, "fallback", "fn", c["fallback"][:600])
            if set(c) != set(e):
                return OpFailure(call, "shape", "observations", f"{sorted(c)} vs {sorted(e)}")
            ref = _observe(eager_module.fn, eager_module, call_set, float64=True)
            problems = {k: p for k in e if (p := _problem(c[k], e[k], ref.get(k), None, floor))}
            if problems and yardstick:
                if reference is None:
                    reference = _torch_compiled(source)
                    stats["yardstick_runs"] = stats.get("yardstick_runs", 0) + 1
                try:
                    i = _observe(reference, eager_module, call_set)  # type: ignore[arg-type]
                except Exception:
                    i = {}
                problems = {
                    k: p
                    for k in problems
                    if (p := _problem(c[k], e[k], ref.get(k), i.get(k), floor))
                }
            if problems:
                where, detail = next(iter(problems.items()))
                kind = (
                    "grad"
                    if where.startswith("grad")
                    else "inputs"
                    if where.startswith("arg")
                    else "value"
                )
                return OpFailure(call, kind, where, detail)
        stats["graphs"] = stats.get("graphs", 0) + counter[0]
        if counter[0] == 0:
            return OpFailure(0, "no_graph", "fn", "nothing was compiled")
        return None
    finally:
        compile_api.config.suppress_errors = saved
        compile_api.reset()


def check_saved(source: str) -> None:
    """A saved reproducer's test body."""
    failure = check_op_source(source)
    assert failure is None, str(failure)
