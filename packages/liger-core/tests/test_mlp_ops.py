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
