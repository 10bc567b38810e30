"""The kl_div check against the float64 oracle, without pytest."""

from __future__ import annotations

import torch

from liger_core.conformance import assert_close, loosest
from liger_core.conformance._loss_util import assert_unchanged, clones, gen, upstream
from liger_core.ops import kl_div as contract


def make_inputs(n, vocab, dtype, device, log_target=False, seed=0, true_dtype=None):
    """y_pred log-probabilities; y_true probabilities (a few exact zeros) or log-probabilities."""
    g = gen(seed)
    y_pred = torch.log_softmax(torch.randn(n, vocab, generator=g) * 2, -1).to(dtype)
    t = torch.randn(n, vocab, generator=g) * 2
    if log_target:
        y_true = torch.log_softmax(t, -1)
    else:
        y_true = torch.softmax(t, -1)
        y_true[torch.rand(n, vocab, generator=g) < 0.1] = 0.0  # the eps floor inside the log
    return y_pred.to(device), y_true.to(true_dtype or dtype).to(device)


def check_kl_div(backend, y_pred, y_true, reduction="batchmean", log_target=False, eps=1e-10, grad_scalar=1.0, seed=0):
    before = clones(y_pred, y_true)
    p_in = y_pred.clone().requires_grad_()
    loss = backend.ops["kl_div"](p_in, y_true, reduction, log_target, eps)
    dy_dev = upstream(loss.shape, seed, grad_scalar).to(loss.device, loss.dtype)
    loss.backward(dy_dev)

    p64 = y_pred.detach().cpu().double().requires_grad_()
    loss64 = contract.math(p64, y_true.detach().cpu().double(), reduction, log_target, eps)
    loss64.backward(dy_dev.cpu().double())

    tol = loosest(y_pred.dtype, y_true.dtype)
    assert loss.dtype == torch.float32 and loss.device == y_pred.device, "kl_div: loss dtype/device"
    # Elements y_true * log(y_true) and y_true * y_pred cancel: scale by the larger term.
    terms = (y_true.detach().cpu().double().abs() * p64.detach().abs()).sum() if reduction != "none" else None
    scale = None
    if terms is not None:
        div = {"batchmean": max(y_pred.shape[0], 1), "mean": max(y_pred.numel(), 1), "sum": 1}[reduction]
        scale = float(terms) / div * abs(float(dy_dev)) if loss.dim() == 0 else None
    assert_close(loss, loss64, tol, "kl_div loss", scale=scale)
    assert p_in.grad is not None and p_in.grad.dtype == y_pred.dtype, "kl_div: grad_y_pred"
    assert_close(p_in.grad, p64.grad, tol, "kl_div grad_y_pred")
    assert_unchanged("kl_div", y_pred=(p_in, before[0]), y_true=(y_true, before[1]))
