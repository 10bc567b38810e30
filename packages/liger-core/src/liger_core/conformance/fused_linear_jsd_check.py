"""The fused_linear_jsd check against the float64 oracle, without pytest."""

from __future__ import annotations

import torch

from liger_core.conformance import assert_close, loosest
from liger_core.conformance._loss_util import assert_unchanged, clones, gen, grad_scale_through, labels, upstream
from liger_core.ops import jsd as jsd_contract


def make_inputs(
    n, hidden, teacher_hidden, vocab, dtype, device, seed=0, with_labels=True, ignore_index=-100, ignored=0.25
):
    g = gen(seed)
    xs = torch.randn(n, hidden, generator=g).to(dtype)
    ws = (torch.randn(vocab, hidden, generator=g) * (2.0 / max(hidden, 1) ** 0.5)).to(dtype)
    xt = torch.randn(n, teacher_hidden, generator=g).to(dtype)
    wt = (torch.randn(vocab, teacher_hidden, generator=g) * (2.0 / max(teacher_hidden, 1) ** 0.5)).to(dtype)
    lab = labels(n, vocab, seed, ignore_index, ignored).to(device) if with_labels else None
    return xs.to(device), ws.to(device), xt.to(device), wt.to(device), lab


def check_fused_linear_jsd(
    backend,
    xs,
    ws,
    xt,
    wt,
    shift_labels=None,
    jsd_beta=0.5,
    ignore_index=-100,
    temperature=1.0,
    grad_scalar=1.0,
    seed=0,
):
    before = clones(xs, ws, xt, wt, shift_labels)
    xs_in, ws_in = xs.clone().requires_grad_(), ws.clone().requires_grad_()
    loss = backend.ops["fused_linear_jsd"](xs_in, ws_in, xt, wt, shift_labels, jsd_beta, ignore_index, temperature)
    dy_dev = upstream(loss.shape, seed, grad_scalar).to(loss.device, loss.dtype)
    loss.backward(dy_dev)

    xs64 = xs.detach().cpu().double().requires_grad_()
    ws64 = ws.detach().cpu().double().requires_grad_()
    logits = xs64 @ ws64.t()
    logits.retain_grad()
    t_logits = xt.detach().cpu().double() @ wt.detach().cpu().double().t()
    labels64 = shift_labels.cpu() if shift_labels is not None else None
    x = torch.log_softmax(logits / temperature, -1)
    y = torch.log_softmax(t_logits / temperature, -1)
    loss64 = jsd_contract.math(x, y, labels64, jsd_beta, ignore_index)
    loss64.backward(dy_dev.cpu().double())

    tol = loosest(xs.dtype, xt.dtype)
    assert loss.dtype == torch.float32 and loss.dim() == 0, "fused_linear_jsd: loss must be a float32 scalar"
    with torch.no_grad():
        terms = (y.exp() * (y.abs() + 1) + x.exp() * (x.abs() + 1)).sum(-1)
        if labels64 is not None:
            keep = labels64 != ignore_index
            terms, n = terms[keep], int(keep.sum())
        else:
            n = terms.numel()
        scale = float(terms.sum()) / max(n, 1) * abs(float(dy_dev)) if n else None
    assert_close(loss, loss64, tol, "fused_linear_jsd loss", scale=scale)
    g = logits.grad
    # The logits' gradient itself is a difference of O(p/n) terms; bound it by their size.
    with torch.no_grad():
        gmag = (x.exp() * (x.abs() + y.abs() + 1)) / max(n, 1) / abs(temperature) * abs(float(dy_dev))
    assert xs_in.grad is not None and xs_in.grad.dtype == xs.dtype
    assert_close(
        xs_in.grad, xs64.grad, tol, "fused_linear_jsd grad_student_input", scale=grad_scale_through(gmag, ws64.detach())
    )
    assert ws_in.grad is not None and ws_in.grad.dtype == ws.dtype
    assert_close(
        ws_in.grad,
        ws64.grad,
        tol,
        "fused_linear_jsd grad_student_weight",
        scale=grad_scale_through(gmag.t(), xs64.detach()),
    )
    del g
    assert_unchanged(
        "fused_linear_jsd",
        student_input=(xs_in, before[0]),
        student_weight=(ws_in, before[1]),
        teacher_input=(xt, before[2]),
        teacher_weight=(wt, before[3]),
        shift_labels=(shift_labels, before[4]),
    )
