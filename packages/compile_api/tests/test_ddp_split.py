"""The DDP graph splitter on FX graphs, and its hook-up with a live (one-rank) DDP module."""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.fx
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import compile_api
from compile_api import ddp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_ddp_support as support  # noqa: E402

WIDTH = 16
LAYER_BYTES = WIDTH * (WIDTH + 1) * 4  # one Linear(16, 16) in float32


class Chain(nn.Module):
    def __init__(self, depth: int = 6) -> None:
        super().__init__()
        self.layers = nn.Sequential(*[nn.Linear(WIDTH, WIDTH) for _ in range(depth)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x).sum(dim=1)


def module_graph(model: nn.Module) -> tuple[torch.fx.GraphModule, list[Any]]:
    """symbolic_trace's graph: Linear layers are call_module nodes."""
    return torch.fx.symbolic_trace(model), [torch.randn(4, WIDTH)]


def attr_graph(model: nn.Module) -> tuple[torch.fx.GraphModule, list[Any]]:
    """Traced through the modules: parameters are get_attr nodes."""
    graph = support._TraceThroughModules().trace(model)
    return torch.fx.GraphModule(model, graph), [torch.randn(4, WIDTH)]


def lifted(model: nn.Module) -> tuple[torch.fx.GraphModule, list[Any]]:
    """Parameters as placeholders fed the real Parameters, as symbolic_vm captures them."""
    gm, params = support.lifted_graph(model)
    return gm, [*params, torch.randn(4, WIDTH)]


GRAPH_KINDS: dict[str, Callable[[nn.Module], tuple[torch.fx.GraphModule, list[Any]]]] = {
    "call_module": module_graph,
    "get_attr": attr_graph,
    "placeholder": lifted,
}


def recording_eager() -> tuple[list[tuple[torch.fx.GraphModule, list[Any]]], Any]:
    calls: list[tuple[torch.fx.GraphModule, list[Any]]] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        calls.append((gm, list(example_inputs)))
        return gm.forward

    return calls, backend


def first(out: Any) -> torch.Tensor:
    return out[0] if isinstance(out, (tuple, list)) else out


# ---------------------------------------------------------------------------------------------
# Bucket assignment


@pytest.mark.parametrize("kind", sorted(GRAPH_KINDS))
@pytest.mark.parametrize(
    ("cap", "expected"),
    [
        (LAYER_BYTES, 6),  # every layer fills a bucket
        (2 * LAYER_BYTES, 3),
        (3 * LAYER_BYTES, 2),
        (2 * LAYER_BYTES + 1, 2),  # a bucket closes once it reaches the cap: 3 layers each
        (100 * LAYER_BYTES, 1),
    ],
)
def test_bucket_count_follows_parameter_bytes_and_cap(kind: str, cap: int, expected: int) -> None:
    gm, inputs = GRAPH_KINDS[kind](Chain())
    buckets = ddp.assign_buckets(gm, inputs, cap)
    assert len(buckets) == expected
    assert sum(b.nbytes for b in buckets) == 6 * LAYER_BYTES
    compute = [n.name for n in gm.graph.nodes if n.op.startswith("call_")]
    assert [n for b in buckets for n in b.nodes] == compute, "buckets cover the graph in order"


def test_first_bucket_cap_applies_to_the_last_layers() -> None:
    gm, inputs = module_graph(Chain())
    buckets = ddp.assign_buckets(gm, inputs, 100 * LAYER_BYTES, first_bucket_bytes_cap=LAYER_BYTES)
    assert [b.nbytes for b in buckets] == [5 * LAYER_BYTES, LAYER_BYTES]
    assert buckets[-1].params == ("layers.5.weight", "layers.5.bias")


def test_frozen_and_ignored_parameters_do_not_count() -> None:
    model = Chain()
    model.layers[5].requires_grad_(False)
    gm, inputs = lifted(model)
    ignored = [model.layers[4].weight, model.layers[4].bias]
    buckets = ddp.assign_buckets(gm, inputs, LAYER_BYTES, ignored_parameters=ignored)
    assert len(buckets) == 4
    names = [p for b in buckets for p in b.params]
    assert not any("layers_4" in n or "layers_5" in n for n in names)


def test_tied_parameter_counts_once_at_its_first_use() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(WIDTH, WIDTH)
            self.b = nn.Linear(WIDTH, WIDTH)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.a(self.b(self.a(x)))

    gm, inputs = lifted(Tied())
    buckets = ddp.assign_buckets(gm, inputs, LAYER_BYTES)
    assert [b.nbytes for b in buckets] == [LAYER_BYTES, LAYER_BYTES]
    assert buckets[0].params == ("p_a_weight", "p_a_bias")


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 300), min_size=1, max_size=12),
    cap=st.integers(4, 2000),
    first_cap=st.integers(4, 2000),
)
def test_buckets_equal_ddp_own_assignment_in_gradient_order(
    sizes: list[int], cap: int, first_cap: int
) -> None:
    """One parameter per node: our buckets are exactly DDP's for the reverse order of use."""
    params = [nn.Parameter(torch.zeros(n)) for n in sizes]
    graph = torch.fx.Graph()
    placeholders = [graph.placeholder(f"p{i}") for i in range(len(params))]
    x = graph.placeholder("x")
    for p in placeholders:
        x = graph.call_function(torch.add, (x, graph.call_method("sum", (p,))))
    graph.output((x,))
    gm = torch.fx.GraphModule(nn.Module(), graph)
    ours = ddp.assign_buckets(gm, [*params, torch.zeros(())], cap, first_bucket_bytes_cap=first_cap)
    ready_order = list(reversed(params))
    theirs, _ = dist._compute_bucket_assignment_by_size(ready_order, [first_cap, cap])
    ours_as_ready_indices = [
        sorted(len(params) - 1 - int(name[1:]) for name in b.params) for b in reversed(ours)
    ]
    assert ours_as_ready_indices == [sorted(b) for b in theirs]


# ---------------------------------------------------------------------------------------------
# Split and compile


@pytest.mark.parametrize("kind", sorted(GRAPH_KINDS))
def test_split_graph_matches_unsplit_forward_and_backward(kind: str) -> None:
    torch.manual_seed(0)
    model = Chain()
    gm, inputs = GRAPH_KINDS[kind](model)
    x = inputs[-1].requires_grad_()
    compiled = ddp.ddp_split_backend(support.eager_backend, 2 * LAYER_BYTES)(gm, inputs)
    assert compiled.num_subgraphs == 3

    expected = first(gm(*inputs))
    expected.square().sum().backward()
    want = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]  # type: ignore[union-attr]
    model.zero_grad()
    x.grad = None

    got = first(compiled(*inputs))
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    got.square().sum().backward()
    have = [p.grad for p in model.parameters()] + [x.grad]
    for g, w in zip(have, want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


@pytest.mark.parametrize("backend_name", ["eager", "regions"])
def test_split_transformer_matches_unsplit_graph(backend_name: str) -> None:
    torch.manual_seed(0)
    model = support.TinyTransformer()
    gm, params = support.lifted_graph(model)
    tokens = torch.randint(0, 64, (3, 8))
    cap = support.param_bytes(model) // 4
    backend = support.BACKENDS[backend_name]()
    compiled = ddp.ddp_split_backend(backend, cap)(gm, [*params, tokens])
    assert compiled.num_subgraphs >= 4

    reference = gm(*params, tokens)[0]
    reference.logsumexp(-1).sum().backward()
    want = [p.grad.clone() for p in params]  # type: ignore[union-attr]
    model.zero_grad()
    out = compiled(*params, tokens)[0]
    torch.testing.assert_close(out, reference)
    out.logsumexp(-1).sum().backward()
    for p, w in zip(params, want, strict=True):
        torch.testing.assert_close(p.grad, w)


def test_each_subgraph_is_compiled_on_its_own_example_inputs() -> None:
    model = Chain()
    gm, inputs = lifted(model)
    calls, backend = recording_eager()
    compiled = ddp.ddp_split_backend(backend, 2 * LAYER_BYTES)(gm, inputs)
    assert len(calls) == compiled.num_subgraphs == 3
    params = list(model.parameters())
    for i, (sub, example) in enumerate(calls):
        placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
        assert len(placeholders) == len(example)
        given_params = [v for v in example if isinstance(v, nn.Parameter)]
        # the bucket's own layers, as the very Parameter objects
        assert [id(p) for p in given_params] == [id(p) for p in params[4 * i : 4 * i + 4]]
        activations = [v for v in example if not isinstance(v, nn.Parameter)]
        assert len(activations) == 1 and activations[0].shape == (4, WIDTH)
        if i > 0:
            assert activations[0].requires_grad, "an intermediate keeps requires_grad"
        output = next(n for n in sub.graph.nodes if n.op == "output")
        assert isinstance(output.args[0], tuple), "each subgraph returns a tuple"


def test_one_bucket_compiles_the_graph_whole() -> None:
    gm, inputs = lifted(Chain())
    calls, backend = recording_eager()
    compiled = ddp.ddp_split_backend(backend, 10**9)(gm, inputs)
    assert compiled.num_subgraphs == 1 and compiled.split_gm is None
    assert len(calls) == 1 and calls[0][0] is gm and calls[0][1] == inputs
    torch.testing.assert_close(compiled(*inputs)[0], gm(*inputs)[0], rtol=0, atol=0)


def test_compiling_does_not_run_the_model() -> None:
    """Example values come from fake tensors: BatchNorm's running statistics stay untouched."""
    model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.BatchNorm1d(WIDTH), nn.Linear(WIDTH, WIDTH))
    gm, inputs = module_graph(model)  # BatchNorm as a module: its real buffers in the graph
    before = model[1].running_mean.clone()  # type: ignore[union-attr]
    batches = model[1].num_batches_tracked.clone()  # type: ignore[union-attr]
    compiled = ddp.ddp_split_backend(support.eager_backend, LAYER_BYTES)(gm, inputs)
    assert compiled.num_subgraphs == 2
    torch.testing.assert_close(model[1].running_mean, before, rtol=0, atol=0)
    assert torch.equal(model[1].num_batches_tracked, batches)  # type: ignore[arg-type]
    out = compiled(*inputs)
    assert out.shape == (4, WIDTH)
    assert model[1].num_batches_tracked.item() == batches.item() + 1  # type: ignore[union-attr]
    assert not torch.equal(model[1].running_mean, before), "the compiled run updates them"


def test_split_is_logged_with_the_subgraph_count(caplog: pytest.LogCaptureFixture) -> None:
    gm, inputs = lifted(Chain())
    with caplog.at_level(logging.INFO, logger="strata.compile_api"):
        ddp.ddp_split_backend(support.eager_backend, 3 * LAYER_BYTES)(gm, inputs)
    messages = [r.getMessage() for r in caplog.records if r.name == "strata.compile_api"]
    assert any("split a graph into 2 subgraphs" in m for m in messages), messages


def _dynamic_graph() -> tuple[torch.fx.GraphModule, list[Any], list[nn.Linear]]:
    """A captured-style graph with a symbolic batch size (fxbuild, dynamic=True)."""
    import fxbuild

    layers = [nn.Linear(WIDTH, WIDTH) for _ in range(4)]
    builder = fxbuild.GraphBuilder(dynamic=True)
    weights = [
        (builder.placeholder(f"w{i}", layer.weight), builder.placeholder(f"b{i}", layer.bias))
        for i, layer in enumerate(layers)
    ]
    h = builder.placeholder("x", torch.randn(8, WIDTH))
    batch = builder.call_method("size", [h, 0])  # a symbolic size crossing the buckets
    for w, b in weights:
        h = builder.call_function(torch.relu, [builder.call_function(F.linear, [h, w, b])])
    out = builder.call_method("view", [h, batch, -1])
    return builder.finish([out]), builder.example_inputs, layers


@pytest.mark.parametrize("backend_name", ["eager", "aot_eager"])
def test_graph_with_symbolic_sizes_splits_and_serves_other_sizes(backend_name: str) -> None:
    torch.manual_seed(0)
    gm, inputs, _ = _dynamic_graph()
    backend = compile_api.lookup_backend(backend_name)
    calls: list[torch.fx.GraphModule] = []

    def recording(sub: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        calls.append(sub)
        return backend(sub, example_inputs)

    compiled = ddp.ddp_split_backend(recording, LAYER_BYTES)(gm, inputs)
    assert compiled.num_subgraphs == 4
    for sub in calls:
        for node in sub.graph.nodes:
            if node.op == "placeholder" and node.name == "x":
                assert isinstance(node.meta["example_value"].shape[0], torch.SymInt)
    for sub in calls:
        placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
        assert all(isinstance(n.meta["example_value"], torch.Tensor) for n in placeholders), (
            "sizes are recomputed where they are used, never passed between subgraphs"
        )
    last = calls[-1]
    assert any(n.op == "call_method" and n.target == "size" for n in last.graph.nodes)
    for batch in (8, 5, 3):
        args = [*inputs[:-1], torch.randn(batch, WIDTH)]
        torch.testing.assert_close(compiled(*args)[0], gm(*args)[0])


def test_fake_example_inputs_compile_the_graph_whole() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    gm, inputs = lifted(Chain())
    inputs[-1] = FakeTensorMode().from_tensor(inputs[-1])
    calls, backend = recording_eager()
    splitter = ddp.ddp_split_backend(backend, LAYER_BYTES)
    compiled = splitter(gm, inputs)
    assert compiled.num_subgraphs == 1 and len(calls) == 1
    assert "fake" in splitter.records[-1].reason_unsplit
    assert len(splitter.records[-1].buckets) == 6


def test_caps_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        ddp.ddp_split_backend(support.eager_backend, 0)


# ---------------------------------------------------------------------------------------------
# Hook-up with a live DDP module (one gloo rank)


@pytest.fixture(scope="module")
def process_group() -> Iterator[None]:
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    with support.single_process_group():
        yield


def test_maybe_wrap_leaves_the_backend_alone_outside_ddp() -> None:
    assert ddp.active_ddp_module() is None
    assert ddp.maybe_wrap_for_ddp(support.eager_backend, True) is support.eager_backend


def test_maybe_wrap_takes_caps_from_the_active_ddp_module(process_group: None) -> None:
    seen: list[Any] = []

    class Probe(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(ddp.active_ddp_module())
            seen.append(ddp.maybe_wrap_for_ddp(support.eager_backend, True))
            seen.append(ddp.maybe_wrap_for_ddp(support.eager_backend, False))
            return self.linear(x)

    model = nn.parallel.DistributedDataParallel(Probe(), bucket_cap_mb=1)
    model(torch.randn(2, 4))
    active, wrapped, unwrapped = seen
    assert active is model
    assert isinstance(wrapped, ddp.DDPSplitBackend)
    assert wrapped.bucket_bytes_cap == model.bucket_bytes_cap == 1024 * 1024
    assert wrapped.first_bucket_bytes_cap == 1024 * 1024
    assert unwrapped is support.eager_backend
    assert ddp.active_ddp_module() is None, "unset again after DDP's forward"


def test_default_bucket_size_gives_a_small_first_bucket(process_group: None) -> None:
    caps: list[int] = []

    class Probe(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            wrapped = ddp.maybe_wrap_for_ddp(support.eager_backend, True)
            assert isinstance(wrapped, ddp.DDPSplitBackend)
            caps.extend([wrapped.bucket_bytes_cap, wrapped.first_bucket_bytes_cap])
            return super().forward(x)

    nn.parallel.DistributedDataParallel(Probe(4, 4))(torch.randn(2, 4))
    assert caps == [25 * 1024 * 1024, dist._DEFAULT_FIRST_BUCKET_BYTES]


def _train_steps(
    model: nn.Module, make_input: Callable[[int], torch.Tensor], steps: int
) -> list[torch.Tensor]:
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for step in range(steps):
        opt.zero_grad()
        loss = model(make_input(step)).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return losses


@pytest.mark.parametrize("backend_name", ["eager", "regions"])
def test_split_under_ddp_trains_like_eager_ddp(process_group: None, backend_name: str) -> None:
    torch.manual_seed(0)
    base = support.MLP(width=WIDTH, depth=6)
    eager_model = support.MLP(width=WIDTH, depth=6)
    eager_model.load_state_dict(base.state_dict())
    cap_mb = 2 * LAYER_BYTES / 2**20
    eager = nn.parallel.DistributedDataParallel(eager_model, bucket_cap_mb=cap_mb)
    runner = support.TracedRunner(base, support.BACKENDS[backend_name]())
    split = nn.parallel.DistributedDataParallel(runner, bucket_cap_mb=cap_mb)

    def make_input(step: int) -> torch.Tensor:
        return torch.randn(8, WIDTH, generator=torch.Generator().manual_seed(step))

    want = _train_steps(eager, make_input, 4)
    got = _train_steps(split, make_input, 4)
    torch.testing.assert_close(got, want)
    for p, q in zip(base.parameters(), eager_model.parameters(), strict=True):
        torch.testing.assert_close(p, q)
    assert runner.compiled.num_subgraphs == support.ddp_bucket_count(eager) == 3


def _bucket_events(optimize_ddp: bool) -> list[tuple[str, int]]:
    torch.manual_seed(0)
    events: list[tuple[str, int]] = []
    runner = support.TracedRunner(
        support.MLP(width=WIDTH, depth=6),
        support.RegionBackend(events),
        optimize_ddp=optimize_ddp,
    )
    model = nn.parallel.DistributedDataParallel(runner, bucket_cap_mb=2 * LAYER_BYTES / 2**20)

    # no annotations: DDP checks them at run time, and here they are strings
    def record(state, bucket):  # type: ignore[no-untyped-def]
        events.append(("allreduce", bucket.index()))
        future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        future.set_result(bucket.buffer())  # one rank: the reduced gradient is its own
        return future

    model.register_comm_hook(None, record)
    for _ in range(3):  # DDP settles its buckets after the first iterations
        events.clear()
        model(torch.randn(8, WIDTH)).sum().backward()
    return events


def test_bucket_all_reduce_starts_before_the_earlier_regions_backward(process_group: None) -> None:
    events = _bucket_events(optimize_ddp=True)
    backward_starts = [i for i, e in enumerate(events) if e[0] == "backward"]
    reduces = [i for i, e in enumerate(events) if e[0] == "allreduce"]
    assert len(backward_starts) == len(reduces) == 3, events
    # every bucket but the last is handed to the all-reduce while regions are still to run
    assert all(any(r < b for b in backward_starts) for r in reduces[:-1]), f"no overlap: {events}"
    assert events[0] == ("backward", 2), "regions run backwards from the last one"


def test_without_the_split_every_all_reduce_waits_for_the_whole_backward(
    process_group: None,
) -> None:
    events = _bucket_events(optimize_ddp=False)
    assert events[0] == ("backward", 0)
    assert [e[0] for e in events[1:]] == ["allreduce"] * (len(events) - 1)


# ---------------------------------------------------------------------------------------------
# FSDP


def test_fsdp_module_warns_once(process_group: None) -> None:
    from torch.distributed.fsdp import fully_shard

    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    fully_shard(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert ddp.warn_if_fsdp(model)
        assert ddp.warn_if_fsdp(model)
    messages = [str(w.message) for w in caught if "FSDP" in str(w.message)]
    assert len(messages) == 1 and "graph breaks" in messages[0]
    compile_api.reset()
    with pytest.warns(RuntimeWarning, match="FSDP"):
        ddp.warn_if_fsdp(model)


def test_fsdp1_wrapper_is_detected(process_group: None) -> None:
    from torch.distributed.fsdp import FullyShardedDataParallel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrapped = FullyShardedDataParallel(nn.Linear(4, 4), device_id=torch.device("cpu"))
    assert ddp.is_fsdp_module(wrapped)
    assert ddp.is_fsdp_module(nn.Sequential(wrapped))


def test_plain_and_ddp_modules_are_not_fsdp(process_group: None) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not ddp.warn_if_fsdp(nn.Linear(4, 4))
        assert not ddp.warn_if_fsdp(nn.parallel.DistributedDataParallel(nn.Linear(4, 4)))
        assert not ddp.warn_if_fsdp(lambda x: x)
    assert not caught


def test_graph_is_compiled_whole_when_splitting_fails(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def fail(*args: object) -> None:
        raise RuntimeError("cannot propagate")

    monkeypatch.setattr(ddp, "_submodule_examples", fail)
    gm, inputs = lifted(Chain())
    calls, backend = recording_eager()
    splitter = ddp.ddp_split_backend(backend, LAYER_BYTES)
    with caplog.at_level(logging.WARNING, logger="strata.compile_api"):
        compiled = splitter(gm, inputs)
    assert compiled.num_subgraphs == 1 and len(calls) == 1 and calls[0][0] is gm
    assert "cannot propagate" in splitter.records[-1].reason_unsplit
    assert any("compiling a graph of 6 buckets whole" in r.getMessage() for r in caplog.records)
    torch.testing.assert_close(compiled(*inputs)[0], gm(*inputs)[0], rtol=0, atol=0)


def test_graph_is_compiled_whole_when_the_backend_refuses_a_subgraph(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gm, inputs = lifted(Chain())
    given: list[torch.fx.GraphModule] = []

    def picky(sub: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        given.append(sub)
        if sub is not gm:
            raise NotImplementedError("not this piece")
        return sub.forward

    splitter = ddp.ddp_split_backend(picky, LAYER_BYTES)
    with caplog.at_level(logging.WARNING, logger="strata.compile_api"):
        compiled = splitter(gm, inputs)
    assert compiled.num_subgraphs == 1 and given[-1] is gm
    assert "not this piece" in splitter.records[-1].reason_unsplit
    assert any("whole" in r.getMessage() for r in caplog.records)
    torch.testing.assert_close(compiled(*inputs)[0], gm(*inputs)[0], rtol=0, atol=0)


def test_backend_errors_on_the_whole_graph_propagate() -> None:
    """A backend failing on the whole graph too is the frame compiler's to report."""

    def broken(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        raise NotImplementedError("backend bug")

    gm, inputs = lifted(Chain())
    with pytest.raises(NotImplementedError, match="backend bug"):
        ddp.ddp_split_backend(broken, LAYER_BYTES)(gm, inputs)


def test_default_caps_give_ddp_own_bucket_count(process_group: None) -> None:
    """DDP's defaults (25 MiB buckets, a 1 MiB first one) on a 40 MiB model: same buckets."""
    torch.manual_seed(0)
    base = support.MLP(width=1024, depth=10)
    twin = support.MLP(width=1024, depth=10)
    twin.load_state_dict(base.state_dict())
    eager = nn.parallel.DistributedDataParallel(base)
    runner = support.TracedRunner(twin, support.eager_backend)
    split = nn.parallel.DistributedDataParallel(runner)

    def make_input(step: int) -> torch.Tensor:
        return torch.randn(2, 1024, generator=torch.Generator().manual_seed(step))

    torch.testing.assert_close(
        _train_steps(split, make_input, 3), _train_steps(eager, make_input, 3)
    )
    buckets = runner.compiled.record.buckets
    assert buckets[-1].nbytes < 25 * 2**20, "the last layers fill the small first bucket"
    assert runner.compiled.num_subgraphs == support.ddp_bucket_count(eager) >= 3
