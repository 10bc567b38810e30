"""The distillation losses against torch's own: `fused_linear_kl_div` is torch.nn.KLDivLoss of the
student's temperature-scaled log-softmax (liger-kernel's LigerFusedLinearKLDivLoss semantics)."""

import pytest
import torch
import torch.nn.functional as F

from liger_core.functional import liger_fused_linear_kl_div
from liger_core.nn import LigerFusedLinearKLDivLoss


@pytest.mark.parametrize("reduction", ["batchmean", "mean", "sum"])
def test_fused_linear_kl_div_is_torch_kl_div(reduction):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 8, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(30, 8, generator=g, dtype=torch.float64, requires_grad=True)
    q = torch.softmax(torch.randn(6, 30, generator=g, dtype=torch.float64), -1)
    q[0, :5] = 0.0
    got = liger_fused_linear_kl_div(x.float(), w.float(), q.float(), None, reduction, -100, 1.5)
    want = F.kl_div(torch.log_softmax(x @ w.t() / 1.5, -1), q, reduction=reduction)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)


def test_ignored_rows_count_for_nothing():
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(5, 8, generator=g), torch.randn(20, 8, generator=g)
    q = torch.softmax(torch.randn(5, 20, generator=g), -1)
    labels = torch.tensor([3, -100, 4, -100, 7])
    keep = labels != -100
    got = LigerFusedLinearKLDivLoss()(x, w, q, labels)
    want = F.kl_div(torch.log_softmax(x[keep] @ w.t(), -1), q[keep], reduction="batchmean")
    torch.testing.assert_close(got, want)
    with pytest.raises(ValueError, match="reduction must be one of"):
        LigerFusedLinearKLDivLoss(reduction="none")


def test_cosine_similarity_terms_as_liger_kernel_defines_them():
    """The hard term is cross-entropy of the logits before the temperature; the soft term the
    cosine of the tempered, normalised logits; both over the counted rows."""
    from liger_core.nn import LigerFusedLinearCosineSimilarityLoss

    g = torch.Generator().manual_seed(2)
    xs, ws = torch.randn(7, 8, generator=g), torch.randn(25, 8, generator=g)
    xt, wt = torch.randn(7, 6, generator=g), torch.randn(25, 6, generator=g)
    labels = torch.tensor([1, -100, 3, 4, -100, 9, 24])
    keep = labels != -100
    module = LigerFusedLinearCosineSimilarityLoss(weight_hard_loss=0.3, weight_soft_loss=0.7, beta=0.4,
                                                  temperature=2.0, return_soft_hard_loss=True)  # fmt: skip
    loss, soft, hard = module(xs, ws, xt, wt, labels)
    s, t = xs @ ws.t(), xt @ wt.t()
    want_hard = F.cross_entropy(s[keep], labels[keep], reduction="sum") / keep.sum()
    want_soft = (0.4 * (1 - F.cosine_similarity(s[keep] / 2.0, t[keep] / 2.0, dim=-1))).sum() / keep.sum()
    torch.testing.assert_close(hard, want_hard)
    torch.testing.assert_close(soft, want_soft)
    torch.testing.assert_close(loss, 0.3 * want_hard + 0.7 * want_soft)


@pytest.mark.parametrize("beta", [0.0, 0.3, 1.0])
def test_jsd_loss_terms_as_liger_kernel_defines_them(beta):
    """Hard: cross-entropy before the temperature; soft: the beta-weighted KLs from the mixture
    (torch's kl_div with log targets, as liger-kernel writes it), over the counted rows."""
    import math

    from liger_core.nn import LigerFusedLinearJSDLoss

    g = torch.Generator().manual_seed(4)
    xs, ws = torch.randn(7, 8, generator=g), torch.randn(25, 8, generator=g)
    xt, wt = torch.randn(7, 6, generator=g), torch.randn(25, 6, generator=g)
    bs, bt = torch.randn(25, generator=g), torch.randn(25, generator=g)
    labels = torch.tensor([1, -100, 3, 4, -100, 9, 24])
    keep = labels != -100
    module = LigerFusedLinearJSDLoss(weight_hard_loss=0.3, weight_soft_loss=0.7, beta=beta, temperature=1.7,
                                     return_soft_hard_loss=True)  # fmt: skip
    loss, soft, hard = module(xs, ws, xt, wt, labels, bs, bt)
    s, t = xs @ ws.t() + bs, xt @ wt.t() + bt
    want_hard = F.cross_entropy(s[keep], labels[keep], reduction="sum") / keep.sum()
    sp, tp = torch.log_softmax(s[keep] / 1.7, -1), torch.log_softmax(t[keep] / 1.7, -1)
    if beta == 0:
        rows = F.kl_div(sp, tp, reduction="none", log_target=True)
    elif beta == 1:
        rows = F.kl_div(tp, sp, reduction="none", log_target=True)
    else:
        m = torch.logsumexp(torch.stack([sp + math.log(1 - beta), tp + math.log(beta)]), 0)
        rows = beta * F.kl_div(m, tp, reduction="none", log_target=True) + (1 - beta) * F.kl_div(
            m, sp, reduction="none", log_target=True
        )
    want_soft = rows.sum() / keep.sum()
    torch.testing.assert_close(hard, want_hard)
    torch.testing.assert_close(soft, want_soft)
    torch.testing.assert_close(loss, 0.3 * want_hard + 0.7 * want_soft)
