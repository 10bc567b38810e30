"""The tvd check against the float64 oracle, without pytest."""

from __future__ import annotations

import torch

from liger_core.conformance import assert_close, loosest
from liger_core.conformance._loss_util import assert_unchanged, clones, gen, labels, upstream
from liger_core.ops import tvd as contract


def make_inputs(n, vocab, dtype, device, seed=0, with_labels=True, ignore_index=-100, ignored=0.25):
    g = gen(seed)
    p = torch.softmax(torch.randn(n, vocab, generator=g) * 2, -1).to(dtype)
    q = torch.softmax(torch.randn(n, vocab, generator=g) * 2, -1).to(dtype)
    q[:, :1] = p[:, :1]  # ties: the gradient of |p - q| there is 0
    lab = labels(n, vocab, seed, ignore_index, ignored).to(device) if with_labels else None
    return p.to(device), q.to(device), lab


def check_tvd(backend, p, q, shift_labels=None, reduction="batchmean", ignore_index=-100, grad_scalar=1.0, seed=0):
    before = clones(p, q, shift_labels)
    p_in = p.clone().requires_grad_()
    loss = backend.ops["tvd"](p_in, q, shift_labels, reduction, ignore_index)
    dy_dev = upstream(loss.shape, seed, grad_scalar).to(loss.device, loss.dtype)
    loss.backward(dy_dev)

    p64 = p.detach().cpu().double().requires_grad_()
    labels64 = shift_labels.cpu() if shift_labels is not None else None
    loss64 = contract.math(p64, q.detach().cpu().double(), labels64, reduction, ignore_index)
    loss64.backward(dy_dev.cpu().double())

    tol = loosest(p.dtype, q.dtype)
    assert loss.dtype == torch.float32 and loss.device == p.device, "tvd: loss dtype/device"
    assert_close(loss, loss64, tol, "tvd loss")
    assert p_in.grad is not None and p_in.grad.dtype == p.dtype, "tvd: grad_p"
    assert_close(p_in.grad, p64.grad, tol, "tvd grad_p")
    assert_unchanged("tvd", p=(p_in, before[0]), q=(q, before[1]), shift_labels=(shift_labels, before[2]))
