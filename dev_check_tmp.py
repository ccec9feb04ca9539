import torch, warnings, sys
import compile_api, inductor_lite
compile_api.config.suppress_errors = False
compile_api.config.capture_scalar_outputs = True
compile_api.config.capture_dynamic_output_shape_ops = True
dev = "cuda"
W = torch.linspace(-1, 1, 64, device=dev)
def cond_fn(x):
    return torch.cond(x.sum() > 0, lambda a: (a.sin() * W).relu(), lambda a: a.cos() + 1, (x,)) * 2
def masked(x):
    p = x[x > 0]
    return (p * 2).exp().sum() + p.numel(), x.nonzero()
def item_fn(x):
    return x * x.abs().max().item() + int(x.max() * 3)
def strict(gm, ex):
    return inductor_lite.compile_fx(gm, ex, config=inductor_lite.InductorConfig(fallback="raise"))
results = []
for mode in (None, "reduce-overhead"):
    for fn in (cond_fn, masked, item_fn):
        compile_api.reset()
        opts = {} if mode is None else {"mode": mode}
        c = compile_api.compile(fn, fullgraph=True, **opts) if mode else compile_api.compile(fn, fullgraph=True, backend=strict)
        ok = True
        try:
            for k in range(6):
                x = (torch.randn(64, device=dev) + (0.8 if k % 2 else -0.8)).requires_grad_(fn is cond_fn)
                with warnings.catch_warnings():
                    warnings.simplefilter("error", RuntimeWarning)
                    got = c(x)
                want = fn(x)
                torch.testing.assert_close(got, want)
                if fn is cond_fn:
                    g1, = torch.autograd.grad(got.sum(), x); g2, = torch.autograd.grad(want.sum(), x)
                    torch.testing.assert_close(g1, g2)
        except Exception as e:
            ok = f"{type(e).__name__}: {str(e)[:300]}"
        results.append((mode, fn.__name__, ok))
        print(mode, fn.__name__, ok, flush=True)
