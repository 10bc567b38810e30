"""tiled_mlp's own paths: what it keeps for backward (its input, the weights and the last tile's
gate and up projections: the memory claim, shown against the untiled formula), and the tiled MLP
modules over this package's kernels against the hand-written LLaMA MLP."""

from types import SimpleNamespace

import pytest
import torch
from liger_core.conformance.check import make_args
from liger_core.interface import CATALOGUE

from liger_ops_xpu import BACKEND


def _saved_elements(fn):
    saved = []

    def pack(t):
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(saved)


def test_backward_keeps_the_input_weights_and_last_tile(device):
    op = CATALOGUE["tiled_mlp"]
    args = op.bind(make_args("tiled_mlp", device, shape=(64, 16), intermediate=48, num_shards=4))
    for name in op.grads:
        args[name].requires_grad_()
    tiled = _saved_elements(lambda: BACKEND.op("tiled_mlp")(*args.values()))
    untiled = _saved_elements(lambda: op.math(*args.values()))
    assert tiled == 64 * 16 + 3 * 16 * 48 + 2 * 16 * 48  # x, the weights, one tile's gate and up
    assert untiled >= tiled + 3 * 64 * 48  # the formula keeps (tokens, intermediate) activations


@pytest.mark.parametrize("act", ("silu", "gelu_pytorch_tanh"))
def test_tiled_mlp_modules(device, monkeypatch, act):
    """LigerTiledSwiGLUMLP / LigerTiledGEGLUMLP: the gradients of x and of every weight match the
    hand-written MLP, over uneven tiles."""
    from liger_core.nn import LigerTiledGEGLUMLP, LigerTiledSwiGLUMLP
    from liger_core.nn import mlp as mlp_module

    monkeypatch.setattr(mlp_module, "liger_tiled_mlp", BACKEND.op("tiled_mlp"))
    config = SimpleNamespace(hidden_size=24, intermediate_size=40, hidden_act=act)
    if act == "silu":
        module, fn = LigerTiledSwiGLUMLP(config, num_shards=4), torch.nn.functional.silu
    else:
        module = LigerTiledGEGLUMLP(config, num_shards=4)
        fn = lambda a: torch.nn.functional.gelu(a, approximate="tanh")
    module = module.to(device)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 24, generator=gen).to(device)
    dy = torch.randn(3, 5, 24, generator=gen).to(device)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    module(x1).backward(dy)
    p = dict(module.named_parameters())
    w = {k: v.detach().clone().requires_grad_() for k, v in p.items()}
    h = fn(x2 @ w["gate_proj.weight"].t()) * (x2 @ w["up_proj.weight"].t())
    (h @ w["down_proj.weight"].t()).backward(dy)
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-4, atol=1e-5)
    for k, param in p.items():
        torch.testing.assert_close(param.grad, w[k].grad, rtol=1e-4, atol=1e-5, msg=k)
