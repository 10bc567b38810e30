"""The jsd check against the float64 oracle, without pytest."""

from __future__ import annotations

import torch

from liger_core.conformance import assert_close, loosest
from liger_core.conformance._loss_util import assert_unchanged, clones, gen, labels, upstream
from liger_core.ops import jsd as contract


def make_inputs(n, vocab, dtype, device, seed=0, with_labels=True, ignore_index=-100, ignored=0.25):
    g = gen(seed)
    s = torch.log_softmax(torch.randn(n, vocab, generator=g) * 2, -1).to(dtype)
    t = torch.log_softmax(torch.randn(n, vocab, generator=g) * 2, -1).to(dtype)
    lab = labels(n, vocab, seed, ignore_index, ignored).to(device) if with_labels else None
    return s.to(device), t.to(device), lab


def check_jsd(
    backend, student_logp, teacher_logp, shift_labels=None, beta=0.5, ignore_index=-100, grad_scalar=1.0, seed=0
):
    before = clones(student_logp, teacher_logp, shift_labels)
    s_in = student_logp.clone().requires_grad_()
    loss = backend.ops["jsd"](s_in, teacher_logp, shift_labels, beta, ignore_index)
    dy_dev = upstream(loss.shape, seed, grad_scalar).to(loss.device, loss.dtype)
    loss.backward(dy_dev)

    s64 = student_logp.detach().cpu().double().requires_grad_()
    t64 = teacher_logp.detach().cpu().double()
    labels64 = shift_labels.cpu() if shift_labels is not None else None
    loss64 = contract.math(s64, t64, labels64, beta, ignore_index)
    loss64.backward(dy_dev.cpu().double())

    tol = loosest(student_logp.dtype, teacher_logp.dtype)
    assert loss.dtype == student_logp.dtype and loss.device == student_logp.device, "jsd: loss dtype/device"
    # The divergence is a sum of terms P*(logP - logM) that cancel: scale by their magnitude.
    with torch.no_grad():
        terms = (t64.exp() * (t64.abs() + 1) + s64.exp() * (s64.abs() + 1)).sum(-1)
        if shift_labels is not None:
            keep = labels64 != ignore_index
            terms, n = terms[keep], int(keep.sum())
        else:
            n = terms.numel()
        scale = float(terms.sum()) / max(n, 1) * abs(float(dy_dev)) if n else None
    assert_close(loss, loss64, tol, "jsd loss", scale=scale)
    assert s_in.grad is not None and s_in.grad.dtype == student_logp.dtype, "jsd: grad_student_logp"
    with torch.no_grad():
        gscale = float((s64.exp() * (s64.abs() + t64.abs() + 1)).max()) / max(n, 1) * abs(float(dy_dev))
    assert_close(s_in.grad, s64.grad, tol, "jsd grad_student_logp", scale=gscale)
    assert_unchanged(
        "jsd",
        student_logp=(s_in, before[0]),
        teacher_logp=(teacher_logp, before[1]),
        shift_labels=(shift_labels, before[2]),
    )
