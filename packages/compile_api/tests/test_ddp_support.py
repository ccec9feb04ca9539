"""Shared pieces of the DDP tests and benchmark: models, graphs, a per-graph autograd backend.

It holds no tests. The multi-process tests import it by its plain module name (this folder is put
on ``sys.path``) so that processes started with ``spawn`` can import the worker functions too.
"""

from __future__ import annotations

import contextlib
import datetime
import faulthandler
import math
import os
import socket
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.fx
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))


# ---------------------------------------------------------------------------------------------
# Models


class MLP(nn.Module):
    """``depth`` square Linear+ReLU layers: every layer holds width*(width+1) parameters."""

    def __init__(self, width: int = 32, depth: int = 6) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


class Block(nn.Module):
    """A pre-norm transformer block with causal self-attention written out in plain ops."""

    def __init__(self, dim: int, heads: int, seq: int) -> None:
        super().__init__()
        self.heads, self.dim, self.seq = heads, dim, seq
        self.register_buffer("mask", torch.ones(seq, seq).tril() == 0)
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d, h = x.size(0), self.seq, self.dim, self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
        scores = scores.masked_fill(self.mask, float("-inf"))
        attn = torch.softmax(scores, dim=-1) @ v
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


class TinyTransformer(nn.Module):
    """Token and position embeddings, ``layers`` blocks, a final norm and a vocabulary head."""

    def __init__(
        self, vocab: int = 64, dim: int = 32, heads: int = 4, layers: int = 2, seq: int = 8
    ) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(seq, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads, seq) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def param_bytes(module: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


# ---------------------------------------------------------------------------------------------
# Graphs the way symbolic_vm presents them


class _TraceThroughModules(torch.fx.Tracer):
    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return False


def lifted_graph(module: nn.Module) -> tuple[torch.fx.GraphModule, list[nn.Parameter]]:
    """FX graph of ``module`` with its parameters as leading placeholders and a tuple output.

    That is how a captured frame looks to a backend: parameters are graph inputs whose example
    inputs are the real ``nn.Parameter`` objects, and the graph returns a tuple.
    """
    graph = _TraceThroughModules().trace(module)
    first_input = next(n for n in graph.nodes if n.op == "placeholder")
    params: list[nn.Parameter] = []
    lifted: dict[int, torch.fx.Node] = {}
    for node in list(graph.nodes):
        if node.op != "get_attr":
            continue
        value: Any = module
        for part in str(node.target).split("."):
            value = getattr(value, part)
        if not isinstance(value, nn.Parameter):
            continue
        if id(value) not in lifted:
            with graph.inserting_before(first_input):
                lifted[id(value)] = graph.placeholder("p_" + str(node.target).replace(".", "_"))
            params.append(value)
        node.replace_all_uses_with(lifted[id(value)])
        graph.erase_node(node)
    output = next(n for n in graph.nodes if n.op == "output")
    output.args = ((output.args[0],),)
    return torch.fx.GraphModule(module, graph), params


class TracedRunner(nn.Module):
    """Runs ``model``'s lifted graph through a backend, compiled at the first call.

    Stands in for ``compile_api.compile`` under DDP: the backend is called during DDP's forward,
    wrapped by ``maybe_wrap_for_ddp`` exactly as the frame compiler is meant to wrap it.
    """

    def __init__(
        self,
        model: nn.Module,
        backend: Callable[..., Any],
        *,
        optimize_ddp: bool = True,
    ) -> None:
        super().__init__()
        self.model = model
        gm, params = lifted_graph(model)
        self.__dict__["_gm"] = gm  # kept off the module tree: DDP must see the model's params only
        self.__dict__["_params"] = params
        self.__dict__["_backend"] = backend
        self.optimize_ddp = optimize_ddp
        self.compiled: Any = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from compile_api.ddp import maybe_wrap_for_ddp

        if self.compiled is None:
            backend = maybe_wrap_for_ddp(self._backend, self.optimize_ddp)
            self.compiled = backend(self._gm, [*self._params, x])
        out = self.compiled(*self._params, x)
        result: torch.Tensor = out[0]
        return result


# ---------------------------------------------------------------------------------------------
# Backends


def eager_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    return gm.forward


class RegionBackend:
    """Makes each graph one ``torch.autograd.Function``, as aot-based backends do.

    All gradients of a region's inputs come out together when its backward returns, so a
    parameter's gradient is ready only once the whole region is done -- the situation the DDP
    split exists for. The backward recomputes the region's forward under autograd. ``events``
    records ``("backward", region)`` when a region's backward starts.
    """

    def __init__(self, events: list[tuple[str, int]] | None = None) -> None:
        self.events = events if events is not None else []
        self.graphs: list[torch.fx.GraphModule] = []
        self.example_inputs: list[list[Any]] = []
        self.__name__ = "region_backend"

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        index = len(self.graphs)
        self.graphs.append(gm)
        self.example_inputs.append(list(example_inputs))
        events = self.events

        class Region(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, *args: Any) -> Any:
                ctx.save_for_backward(*[a for a in args if isinstance(a, torch.Tensor)])
                ctx.args = [None if isinstance(a, torch.Tensor) else a for a in args]
                return tuple(gm(*args))

            @staticmethod
            def backward(ctx: Any, *grads: torch.Tensor) -> Any:
                events.append(("backward", index))
                saved = iter(ctx.saved_tensors)
                with torch.enable_grad():
                    inputs = [
                        next(saved).detach().requires_grad_(next_req) if a is None else a
                        for a, next_req in zip(ctx.args, ctx.needs_input_grad, strict=True)
                    ]
                    outs = list(gm(*inputs))
                    pairs = [
                        (o, g)
                        for o, g in zip(outs, grads, strict=True)
                        if isinstance(o, torch.Tensor) and o.requires_grad
                    ]
                    wanted = [i for i in inputs if isinstance(i, torch.Tensor) and i.requires_grad]
                    got = iter(
                        torch.autograd.grad(
                            [o for o, _ in pairs],
                            wanted,
                            [g if g is not None else torch.zeros_like(o) for o, g in pairs],
                            allow_unused=True,
                        )
                    )
                return tuple(
                    next(got) if isinstance(i, torch.Tensor) and i.requires_grad else None
                    for i in inputs
                )

        def run(*args: Any) -> Any:
            return Region.apply(*args)

        return run


BACKENDS: dict[str, Callable[[], Callable[..., Any]]] = {
    "eager": lambda: eager_backend,
    "regions": RegionBackend,
}


# ---------------------------------------------------------------------------------------------
# Process groups


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def single_process_group() -> Iterator[None]:
    """A gloo process group of one rank (a file store: no port to find)."""
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{os.path.join(tmp, 'store')}",
            rank=0,
            world_size=1,
            timeout=datetime.timedelta(seconds=30),
        )
        try:
            yield
        finally:
            dist.destroy_process_group()


@contextlib.contextmanager
def rank_group(
    backend: str, rank: int, world: int, port: int, out_dir: str, timeout_s: float = 60
) -> Iterator[None]:
    """This rank's process group, for a worker started by ``spawn_with_timeout``.

    A fatal signal's Python traceback goes to ``out_dir/rank<N>.fault`` (the parent shows it). On a
    normal exit every rank meets at a barrier before the group is destroyed: a rank that tears its
    gloo connections down while a peer still reads from them can abort that peer (SIGABRT).
    """
    fault = open(os.path.join(out_dir, f"rank{rank}.fault"), "w")  # noqa: SIM115 (kept open)
    faulthandler.enable(file=fault)
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    try:
        yield
        dist.barrier()
    finally:
        dist.destroy_process_group()


def spawn_with_timeout(
    fn: Callable[..., None],
    args: tuple[Any, ...],
    nprocs: int,
    timeout_s: float,
    fault_dir: str | None = None,
) -> None:
    """torch.multiprocessing.spawn that kills its processes and raises after ``timeout_s``.

    When a process dies, the error carries the fault tracebacks ``rank_group`` left in
    ``fault_dir`` (where the process was when it died).
    """
    import time

    import torch.multiprocessing as mp

    context = mp.spawn(fn, args=args, nprocs=nprocs, join=False)
    assert context is not None
    deadline = time.monotonic() + timeout_s
    try:
        while not context.join(timeout=max(0.1, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                for process in context.processes:
                    if process.is_alive():
                        process.kill()
                raise TimeoutError(
                    f"the {nprocs} DDP processes did not finish in {timeout_s:.0f} s"
                )
    except Exception as exc:
        faults = _fault_reports(fault_dir)
        if not faults:
            raise
        raise RuntimeError(f"{exc}\n{faults}") from exc


def _fault_reports(fault_dir: str | None) -> str:
    if fault_dir is None:
        return ""
    reports = []
    for path in sorted(Path(fault_dir).glob("rank*.fault")):
        text = path.read_text().strip()
        if text:
            reports.append(f"--- {path.name} ---\n{text[-4000:]}")
    return "\n".join(reports)


def ddp_bucket_count(ddp: nn.Module) -> int:
    """Buckets DDP settled on after its first iterations (it rebuilds them in gradient order)."""
    data = ddp._get_ddp_logging_data()  # type: ignore[operator]
    sizes = data.get("rebuilt_bucket_sizes") or data["bucket_sizes"]
    return len(str(sizes).split(","))


# ---------------------------------------------------------------------------------------------
# Training compiled vs uncompiled DDP in each rank


def mlp_case(device: torch.device) -> tuple[nn.Module, Callable[[int, int], Any], Any, int]:
    """(model, input of (rank, step), loss of (output, rank, step), bucket cap in bytes)."""
    model = MLP(width=32, depth=6).to(device)

    def make_input(rank: int, step: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(1000 * rank + step)
        return torch.randn(16, 32, generator=g).to(device)

    def loss(out: torch.Tensor, rank: int, step: int) -> torch.Tensor:
        return out.square().mean()

    return model, make_input, loss, 2 * 32 * 33 * 4  # two hidden layers a bucket


def transformer_case(device: torch.device) -> tuple[nn.Module, Callable[[int, int], Any], Any, int]:
    model = TinyTransformer().to(device)

    def make_input(rank: int, step: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(1000 * rank + step)
        return torch.randint(0, 64, (4, 8), generator=g).to(device)

    def loss(out: torch.Tensor, rank: int, step: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(7000 + 1000 * rank + step)
        target = torch.randint(0, 64, (4, 8), generator=g).to(out.device)
        return torch.nn.functional.cross_entropy(out.reshape(-1, 64), target.reshape(-1))

    return model, make_input, loss, param_bytes(model) // 4


CASES = {"mlp": mlp_case, "transformer": transformer_case}


def train(
    ddp_model: nn.Module,
    make_input: Callable[[int, int], Any],
    loss_fn: Any,
    rank: int,
    steps: int,
) -> list[float]:
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    losses = []
    for step in range(steps):
        opt.zero_grad()
        loss = loss_fn(ddp_model(make_input(rank, step)), rank, step)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def compare_in_rank(
    case: str, backend: str, rank: int, device: torch.device, steps: int
) -> dict[str, Any]:
    """Train one model under plain DDP and under DDP with the split backend, from one init."""
    torch.manual_seed(0)
    model, make_input, loss_fn, cap = CASES[case](device)
    twin, _, _, _ = CASES[case](device)
    twin.load_state_dict(model.state_dict())
    cap_mb = cap / 2**20
    ids = [device.index] if device.type == "cuda" else None
    eager = nn.parallel.DistributedDataParallel(model, device_ids=ids, bucket_cap_mb=cap_mb)
    runner = TracedRunner(twin, BACKENDS[backend]())
    split = nn.parallel.DistributedDataParallel(runner, device_ids=ids, bucket_cap_mb=cap_mb)
    eager_losses = train(eager, make_input, loss_fn, rank, steps)
    split_losses = train(split, make_input, loss_fn, rank, steps)
    return {
        "eager_losses": eager_losses,
        "split_losses": split_losses,
        "eager_params": [p.detach().cpu() for p in model.parameters()],
        "split_params": [p.detach().cpu() for p in twin.parameters()],
        "num_subgraphs": runner.compiled.num_subgraphs,
        "ddp_buckets": ddp_bucket_count(eager),
        "split_ddp_buckets": ddp_bucket_count(split),
    }


def gloo_worker(
    rank: int, world: int, port: int, out_dir: str, cases: list[tuple[str, str]], steps: int
) -> None:
    """One rank of the CPU test: every (model, backend) case, results saved for the parent."""
    with rank_group("gloo", rank, world, port, out_dir, timeout_s=60):
        torch.set_num_threads(1)
        results = {
            f"{case}/{backend}": guarded(
                compare_in_rank, case, backend, rank, torch.device("cpu"), steps
            )
            for case, backend in cases
        }
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))


# ---------------------------------------------------------------------------------------------
# The whole path: compile_api.compile over a DDP module


def capture_problem() -> str:
    """Why ``compile_api.compile`` cannot capture a module's forward yet ('' when it can)."""
    try:
        import compile_api

        graphs: list[torch.fx.GraphModule] = []

        def counting(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
            graphs.append(gm)
            return gm.forward

        torch.manual_seed(0)
        model = MLP(width=8, depth=2)
        x = torch.randn(2, 8)
        out = compile_api.compile(model, backend=counting)(x)
        compile_api.reset()
    except Exception as err:
        return f"compile_api.compile failed: {type(err).__name__}: {err}"
    if not graphs:
        return "compile_api.compile does not capture frames yet (no graph reached the backend)"
    if not torch.allclose(out, model(x)):
        return "compile_api.compile captures but gives wrong results on a small MLP"
    return ""


def backend_problem(name: str) -> str:
    """Why the backend ``name`` cannot train a small MLP yet, without DDP ('' when it can).

    The DDP tests check what DDP adds; a backend that fails on its own is skipped with this.
    """
    import compile_api

    try:
        gm, params = lifted_graph(MLP(width=8, depth=2))
        x = torch.randn(2, 8)
        compiled = compile_api.lookup_backend(name)(gm, [*params, x])
        torch.testing.assert_close(compiled(*params, x)[0], gm(*params, x)[0])
    except Exception as err:
        return f"backend {name!r} cannot compile a graph yet: {type(err).__name__}: {err}"
    suppress = compile_api.config.suppress_errors
    compile_api.config.suppress_errors = False
    try:
        torch.manual_seed(0)
        model = MLP(width=8, depth=2)
        out = compile_api.compile(model, backend=name)(x)
        out.sum().backward()
        torch.testing.assert_close(out, model(x))
    except Exception as err:
        return (
            f"compile_api.compile(..., backend={name!r}) fails without DDP: "
            f"{type(err).__name__}: {str(err)[:300]}"
        )
    finally:
        compile_api.config.suppress_errors = suppress
        compile_api.reset()
    return ""


def guarded(fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """``fn(*args)``, or ``{"error": ...}``: one failing case must not hide the others."""
    try:
        return fn(*args)
    except Exception as err:
        return {"error": f"{type(err).__name__}: {err}"}


def installed_splits(module_name: str) -> list[Any]:
    """The split graphs compile_api installed in a module's globals (its compiled frames)."""
    import sys

    from compile_api.ddp import SplitCompiled

    found = []
    for value in vars(sys.modules[module_name]).values():
        # the frame compiler may wrap what the backend returned (functools-style __wrapped__)
        while not isinstance(value, SplitCompiled) and hasattr(value, "__wrapped__"):
            value = value.__wrapped__
        if isinstance(value, SplitCompiled):
            found.append(value)
    return found


def compare_compiled_in_rank(
    case: str, backend: str, rank: int, device: torch.device, steps: int
) -> dict[str, Any]:
    """Plain DDP vs ``compile_api.compile(DDP(model))`` from one init, same data."""
    import compile_api

    compile_api.reset()
    compile_api.config.suppress_errors = False  # a backend failure must fail, not run eagerly
    torch.manual_seed(0)
    model, make_input, loss_fn, cap = CASES[case](device)
    twin, _, _, _ = CASES[case](device)
    twin.load_state_dict(model.state_dict())
    cap_mb = cap / 2**20
    ids = [device.index] if device.type == "cuda" else None
    eager = nn.parallel.DistributedDataParallel(model, device_ids=ids, bucket_cap_mb=cap_mb)
    ddp_twin = nn.parallel.DistributedDataParallel(twin, device_ids=ids, bucket_cap_mb=cap_mb)
    compiled = compile_api.compile(ddp_twin, backend=backend)
    eager_losses = train(eager, make_input, loss_fn, rank, steps)
    compiled_losses = train(compiled, make_input, loss_fn, rank, steps)
    splits = installed_splits(type(twin).__module__)
    result = {
        "eager_losses": eager_losses,
        "split_losses": compiled_losses,
        "eager_params": [p.detach().cpu() for p in model.parameters()],
        "split_params": [p.detach().cpu() for p in twin.parameters()],
        "subgraphs_per_graph": [s.num_subgraphs for s in splits],
        "ddp_buckets": ddp_bucket_count(eager),
    }
    compile_api.reset()
    return result


def e2e_worker(
    rank: int, world: int, port: int, out_dir: str, cases: list[tuple[str, str]], steps: int
) -> None:
    """One rank of the end-to-end CPU test; results saved for the parent."""
    with rank_group("gloo", rank, world, port, out_dir, timeout_s=60):
        torch.set_num_threads(1)
        results = {
            f"{case}/{backend}": guarded(
                compare_compiled_in_rank, case, backend, rank, torch.device("cpu"), steps
            )
            for case, backend in cases
        }
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))


def nccl_worker(
    rank: int, world: int, port: int, out_dir: str, cases: list[tuple[str, str, str]], steps: int
) -> None:
    """One rank (one GPU) of the NCCL test: ``(path, model, backend)`` cases, path being
    ``runner`` (the splitter on a lifted FX graph) or ``compile`` (compile_api.compile)."""
    for name, value in {
        "NCCL_NVLS_ENABLE": "0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
        "NVSHMEM_DISABLE_NVLS": "1",
    }.items():
        os.environ[name] = value  # NVLink multicast stays off on the shared GPU hosts
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    with rank_group("nccl", rank, world, port, out_dir, timeout_s=120):
        results: dict[str, Any] = {}
        for path, case, backend in cases:
            compare = compare_in_rank if path == "runner" else compare_compiled_in_rank
            results[f"{path}/{case}/{backend}"] = guarded(
                compare, case, backend, rank, device, steps
            )
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))


def sleeping_worker(rank: int, seconds: float) -> None:
    """A rank that hangs (as a stuck collective would), for the timeout test."""
    import time

    time.sleep(seconds)
