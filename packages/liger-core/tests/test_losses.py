"""The loss ops (interface 1.3) in core: the reference agrees with PyTorch's own losses where
the semantics coincide, the modules and functional API dispatch with liger-kernel's argument
orders, and constructors reject bad options."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from liger_core import (
    LigerCrossEntropyLoss,
    LigerFallbackWarning,
    LigerFusedLinearCrossEntropyLoss,
    LigerFusedLinearJSD,
    LigerJSD,
    LigerKLDIVLoss,
    LigerTVDLoss,
    liger_cross_entropy,
    liger_fused_linear_cross_entropy,
)
from liger_core.ops import cross_entropy, fused_linear_jsd, jsd, kl_div, tvd

pytestmark = [
    pytest.mark.usefixtures("clean_registry"),
    pytest.mark.filterwarnings(f"ignore::{LigerFallbackWarning.__module__}.{LigerFallbackWarning.__name__}"),
]


def _inputs(n=24, v=37, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, v, generator=g, dtype=torch.float64) * 3
    target = torch.randint(0, v, (n,), generator=g)
    target[::5] = -100
    weight = torch.rand(v, generator=g, dtype=torch.float64) + 0.5
    return logits, target, weight


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_math_is_torch_cross_entropy(reduction, smoothing, weighted):
    logits, target, weight = _inputs()
    w = weight if weighted else None
    a = logits.clone().requires_grad_()
    b = logits.clone().requires_grad_()
    got, _ = cross_entropy.math(a, target, w, -100, 0.0, smoothing, reduction, None)
    want = F.cross_entropy(b, target, weight=w, ignore_index=-100, reduction=reduction, label_smoothing=smoothing)
    torch.testing.assert_close(got, want)
    g = torch.randn_like(want)
    got.backward(g)
    want.backward(g)
    torch.testing.assert_close(a.grad, b.grad)


def test_cross_entropy_z_loss_and_softcap_formula():
    logits, target, _ = _inputs()
    loss, z = cross_entropy.math(logits, target, None, -100, 0.01, 0.0, "mean", 10.0)
    capped = 10.0 * torch.tanh(logits / 10.0)
    keep = target != -100
    lse = torch.logsumexp(capped, -1)[keep]
    want_z = (0.01 * lse**2).mean()
    want = F.cross_entropy(capped, target) + want_z
    torch.testing.assert_close(z, want_z)
    torch.testing.assert_close(loss, want)


def test_cross_entropy_all_ignored_is_zero_not_nan():
    logits, target, weight = _inputs()
    target[:] = -100
    x = logits.float().requires_grad_()
    loss = cross_entropy.cross_entropy(x, target, weight.float(), lse_square_scale=0.1, label_smoothing=0.1)
    loss.backward()
    assert float(loss) == 0.0 and not x.grad.abs().any()


def test_kl_div_math_is_torch_kl_div():
    g = torch.Generator().manual_seed(1)
    y_pred = torch.log_softmax(torch.randn(6, 11, generator=g, dtype=torch.float64), -1).requires_grad_()
    y_true = torch.softmax(torch.randn(6, 11, generator=g, dtype=torch.float64), -1)
    for reduction in ("batchmean", "sum", "mean", "none"):
        for log_target in (False, True):
            t = y_true.log() if log_target else y_true
            got = kl_div.math(y_pred, t, reduction, log_target, 1e-10)
            want = F.kl_div(y_pred, t, reduction=reduction, log_target=log_target)
            torch.testing.assert_close(got, want)


def test_jsd_half_is_symmetric_js_divergence():
    g = torch.Generator().manual_seed(2)
    p = torch.softmax(torch.randn(5, 9, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(5, 9, generator=g, dtype=torch.float64), -1)
    m = 0.5 * (p + q)
    want = (0.5 * (p * (p / m).log()).sum() + 0.5 * (q * (q / m).log()).sum()) / 5
    torch.testing.assert_close(jsd.math(q.log(), p.log(), None, 0.5, -100), want)
    # beta 0 and 1: forward and reverse KL (liger-kernel's special cases)
    torch.testing.assert_close(jsd.math(q.log(), p.log(), None, 0.0, -100), (p * (p / q).log()).sum() / 5)
    torch.testing.assert_close(jsd.math(q.log(), p.log(), None, 1.0, -100), (q * (q / p).log()).sum() / 5)


def test_tvd_math():
    p = torch.tensor([[0.2, 0.8], [0.5, 0.5], [0.1, 0.9]], dtype=torch.float64)
    q = torch.tensor([[0.6, 0.4], [0.5, 0.5], [0.3, 0.7]], dtype=torch.float64)
    labels = torch.tensor([1, 0, -100])
    assert float(tvd.math(p, q, labels, "batchmean", -100)) == pytest.approx(0.4 / 2)
    assert float(tvd.math(p, q, labels, "mean", -100)) == pytest.approx(0.4 / 4)
    assert float(tvd.math(p, q, None, "sum", -100)) == pytest.approx(0.6)
    assert tvd.math(p, q, labels, "none", -100)[2].abs().sum() == 0


def test_fused_linear_jsd_teacher_gets_no_gradient():
    g = torch.Generator().manual_seed(3)
    xs = torch.randn(4, 6, generator=g, requires_grad=True)
    ws = torch.randn(10, 6, generator=g, requires_grad=True)
    xt = torch.randn(4, 5, generator=g, requires_grad=True)
    wt = torch.randn(10, 5, generator=g, requires_grad=True)
    fused_linear_jsd.fused_linear_jsd(xs, ws, xt, wt).backward()
    assert xs.grad is not None and ws.grad is not None and xt.grad is None and wt.grad is None


def test_modules_match_the_reference():
    logits, target, weight = _inputs()
    logits, weight = logits.float(), weight.float()
    mod = LigerCrossEntropyLoss(weight=weight, label_smoothing=0.1, lse_square_scale=1e-3, return_z_loss=True)
    loss, z = mod(logits, target)
    want, want_z = cross_entropy.cross_entropy(logits, target, weight, -100, 1e-3, 0.1, "mean", None, True)
    torch.testing.assert_close((loss, z), (want, want_z))
    torch.testing.assert_close(liger_cross_entropy(logits, target), cross_entropy.cross_entropy(logits, target))

    g = torch.Generator().manual_seed(4)
    x = torch.randn(24, 8, generator=g)
    w = torch.randn(37, 8, generator=g)
    flce = LigerFusedLinearCrossEntropyLoss(reduction="sum", softcap=3.0)
    torch.testing.assert_close(
        flce(w, x, target), liger_fused_linear_cross_entropy(x, w, target, reduction="sum", softcap=3.0)
    )

    p = torch.softmax(logits, -1)
    q = torch.softmax(logits.flip(0), -1)
    torch.testing.assert_close(LigerTVDLoss("mean")(p, q, target), tvd.tvd(p, q, target, "mean"))
    torch.testing.assert_close(LigerJSD(beta=0.3)(p.log(), q.log(), target), jsd.jsd(p.log(), q.log(), target, 0.3))
    kl = LigerKLDIVLoss(reduction="sum", log_target=True)
    torch.testing.assert_close(kl(p.log(), q.log()), kl_div.kl_div(p.log(), q.log(), "sum", True))
    xt = torch.randn(24, 5, generator=g)
    wt = torch.randn(37, 5, generator=g)
    torch.testing.assert_close(
        LigerFusedLinearJSD(jsd_beta=0.2, temperature=2.0)(x, w, xt, wt, target),
        fused_linear_jsd.fused_linear_jsd(x, w, xt, wt, target, 0.2, -100, 2.0),
    )


@pytest.mark.parametrize(
    "make,pattern",
    [
        (lambda: LigerCrossEntropyLoss(reduction="avg"), r"LigerCrossEntropyLoss: reduction must be one of"),
        (lambda: LigerCrossEntropyLoss(label_smoothing=2.0), r"label_smoothing must be a number in \[0, 1\]"),
        (lambda: LigerCrossEntropyLoss(softcap=-1.0), r"softcap must be None or a number > 0"),
        (lambda: LigerFusedLinearCrossEntropyLoss(accum_dtype=torch.int8), r"accum_dtype must be None"),
        (lambda: LigerKLDIVLoss(reduction="avg"), r"reduction must be one of"),
        (lambda: LigerJSD(beta=2.0), r"beta must be a number in \[0, 1\]"),
        (lambda: LigerFusedLinearJSD(temperature=0), r"temperature must be a nonzero number"),
        (lambda: LigerTVDLoss(reduction="avg"), r"reduction must be one of"),
    ],
)
def test_module_constructors_reject_bad_options(make, pattern):
    with pytest.raises((ValueError, TypeError), match=pattern):
        make()
