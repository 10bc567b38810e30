"""The tiled MLP's orchestration (`liger_core.ops.tiled_mlp`: tiles, recompute, weight-gradient
accumulation) over pure-torch gated kernels, against the untiled formula in float64; the MLP
modules' construction checks. Vendors run the same orchestration over their kernels in the
conformance suite."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from liger_core import LigerTiledGEGLUMLP, LigerTiledSwiGLUMLP
from liger_core.ops import tiled_mlp as T


def _torch_kernels(activation: str) -> T.GatedKernels:
    act = T.ACTIVATIONS[activation]

    def backward(grad_out, gate, up):
        g = gate.detach().requires_grad_()
        u = up.detach().requires_grad_()
        with torch.enable_grad():
            grad_gate, grad_up = torch.autograd.grad(act(g) * u, (g, u), grad_out)
        gate.copy_(grad_gate)
        up.copy_(grad_up)

    return T.GatedKernels(lambda gate, up: act(gate) * up, backward)


class _TorchTiledMLP(T.TiledMLPFunction):
    @staticmethod
    def forward(ctx, x, gate_weight, up_weight, down_weight, activation, num_shards):
        # float64 (no check_args: the contract takes no float64; the orchestration is dtype-blind).
        return T.TiledMLPFunction.shared_forward(
            ctx, x, gate_weight, up_weight, down_weight, num_shards, _torch_kernels(activation)
        )


@pytest.mark.parametrize("activation", tuple(T.ACTIVATIONS))
@pytest.mark.parametrize("shape,num_shards", [((37, 12), None), ((37, 12), 1), ((37, 12), 4), ((2, 9, 12), 100)])
def test_tiled_orchestration_matches_untiled_math(activation, shape, num_shards):
    args = T.args("cpu", shape=shape, intermediate=20, dtype=torch.float32)
    args64 = {k: v.double().requires_grad_() for k, v in args.items()}
    names = ("x", "gate_weight", "up_weight", "down_weight")
    ref = {k: v.detach().clone().requires_grad_() for k, v in args64.items()}
    got = _TorchTiledMLP.apply(*args64.values(), activation, num_shards)
    want = T.math(*ref.values(), activation, num_shards)
    dy = torch.randn(got.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    grads = torch.autograd.grad(got, [args64[n] for n in names], dy)
    want_grads = torch.autograd.grad(want, [ref[n] for n in names], dy)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for name, g, w in zip(names, grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12, msg=lambda m, name=name: f"grad_{name}: {m}")


@pytest.mark.parametrize(
    "rows,hidden,num_shards,want",
    [(65536, 4096, None, 4096), (10, 4, None, 4), (7, 16, 3, 3), (3, 8, 100, 1), (0, 8, None, 1)],
)
def test_tile_rows(rows, hidden, num_shards, want):
    assert T.tile_rows(rows, hidden, num_shards) == want


def test_tiled_modules_reject_what_they_cannot_run():
    cfg = SimpleNamespace(hidden_size=8, intermediate_size=12, hidden_act="silu", mlp_bias=False)
    assert LigerTiledSwiGLUMLP(cfg, num_shards=2).num_shards == 2
    with pytest.raises(ValueError, match=r"hidden_act must be one of .*got 'relu'"):
        LigerTiledSwiGLUMLP(SimpleNamespace(**{**vars(cfg), "hidden_act": "relu"}))
    with pytest.raises(ValueError, match="mlp_bias must be False"):
        LigerTiledSwiGLUMLP(SimpleNamespace(**{**vars(cfg), "mlp_bias": True}))
    with pytest.raises(ValueError, match="num_shards must be None or an int >= 1; got 0"):
        LigerTiledSwiGLUMLP(cfg, num_shards=0)
    with pytest.raises(ValueError, match="activation .* must be one of"):
        LigerTiledGEGLUMLP(cfg)


def _tiled_args64(shape=(37, 12), intermediate=20):
    args = T.args("cpu", shape=shape, intermediate=intermediate, dtype=torch.float32)
    return {k: v.double().requires_grad_() for k, v in args.items()}


class _MatmulCount(torch.overrides.TorchFunctionMode):
    """Counts ``a @ b``: the orchestration's projections (``x_tile @ weight.t()``) and the down
    projection's input gradient (``dy_tile @ down_weight``); its other GEMMs are ``mm``/``addmm_``."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.Tensor.__matmul__, torch.Tensor.matmul):
            self.count += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("keep_last", (False, True))
@pytest.mark.parametrize("num_shards", (1, 4))
def test_backward_recomputes_every_tile_but_the_kept_last(num_shards, keep_last):
    a = {k: v.detach() for k, v in _tiled_args64().items()}
    kernels = _torch_kernels("silu")
    weights = (a["gate_weight"], a["up_weight"], a["down_weight"])
    rows_per_tile = T.tile_rows(37, 12, num_shards)
    out, kept = T.tiled_forward(a["x"], *weights, rows_per_tile, kernels, keep_last)
    assert (kept is not None) == keep_last
    with _MatmulCount() as counted:
        grads = T.tiled_backward(out, a["x"], *weights, rows_per_tile, kernels, (True,) * 4, kept)
    # Per tile: the down projection's input gradient; per recomputed tile: gate and up.
    assert counted.count == num_shards + 2 * (num_shards - keep_last)
    want = torch.autograd.grad(T.math(*(t.requires_grad_() for t in a.values()), "silu", None), list(a.values()), out)
    for name, g, w in zip(a, grads, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12, msg=lambda m, name=name: f"grad_{name}: {m}")


def test_a_retained_graph_backs_up_twice_to_the_same_gradients():
    """The activation's backward writes its gradients over its inputs; the kept tile's saved
    projections are not its inputs, so a second backward reads them unchanged."""
    a = _tiled_args64()
    out = _TorchTiledMLP.apply(*a.values(), "silu", 4)
    dy = torch.randn(out.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    first = torch.autograd.grad(out, list(a.values()), dy, retain_graph=True)
    second = torch.autograd.grad(out, list(a.values()), dy)
    for name, g1, g2 in zip(a, first, second):
        torch.testing.assert_close(g2, g1, rtol=0, atol=0, msg=lambda m, name=name: f"grad_{name}: {m}")


@pytest.mark.parametrize("use_reentrant", (False, True))
def test_checkpointed_and_no_grad_calls(use_reentrant):
    """Under activation checkpointing the kept tile is dropped and recomputed with the rest
    (non-reentrant: through the saved-tensor hooks, like x; reentrant: the first forward runs
    without grad and records nothing): the gradients are the plain call's. Without grad mode
    the forward keeps nothing."""
    from torch.utils.checkpoint import checkpoint

    a = _tiled_args64()
    names = list(a)
    ref = {k: v.detach().clone().requires_grad_() for k, v in a.items()}
    dy = torch.randn(a["x"].shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    got = checkpoint(lambda *t: _TorchTiledMLP.apply(*t, "gelu_tanh", 3), *a.values(), use_reentrant=use_reentrant)
    got.backward(dy)
    _TorchTiledMLP.apply(*ref.values(), "gelu_tanh", 3).backward(dy)
    for name in names:
        torch.testing.assert_close(a[name].grad, ref[name].grad, rtol=1e-12, atol=1e-12, msg=name)
    kept = []
    with torch.no_grad(), torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, lambda t: t):
        _TorchTiledMLP.apply(*a.values(), "silu", 3)
    assert kept == []
