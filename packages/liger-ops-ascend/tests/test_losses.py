"""Code paths of the 1.3 kernels the shared suite may not reach, forced and checked against
the float64 oracle: vocabulary rows chunked (a small UB), several short rows per tile with
programs walking several row blocks, and fused-linear losses over several token chunks."""

from __future__ import annotations

import pytest
import torch
from liger_core.conformance.cross_entropy_check import check_cross_entropy
from liger_core.conformance.cross_entropy_check import make_inputs as ce_inputs
from liger_core.conformance.fused_linear_cross_entropy_check import check_fused_linear_cross_entropy
from liger_core.conformance.fused_linear_cross_entropy_check import make_inputs as flce_inputs
from liger_core.conformance.fused_linear_jsd_check import check_fused_linear_jsd
from liger_core.conformance.fused_linear_jsd_check import make_inputs as fljsd_inputs
from liger_core.conformance.jsd_check import check_jsd
from liger_core.conformance.jsd_check import make_inputs as jsd_inputs
from liger_core.conformance.kl_div_check import check_kl_div
from liger_core.conformance.kl_div_check import make_inputs as kl_inputs
from liger_core.conformance.tvd_check import check_tvd
from liger_core.conformance.tvd_check import make_inputs as tvd_inputs
from liger_core.device import npu_available

from liger_ops_ascend import BACKEND, _divergence, cross_entropy, fused_linear_cross_entropy, hardware

DEVICE = "npu" if npu_available() else "cpu"


def _hw():
    return hardware.current(torch.device(DEVICE))


@pytest.fixture
def few_cores(monkeypatch):
    monkeypatch.setenv("LIGER_ASCEND_VECTOR_CORES", "3")


@pytest.fixture
def small_ub(monkeypatch):
    # A 16 KiB UB (8 KiB budget): a few hundred classes no longer fit one tile.
    monkeypatch.setenv("LIGER_ASCEND_UB_BYTES", str(16 * 1024))


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_chunked_vocab_all_options(small_ub, few_cores, reduction):
    p = cross_entropy.plan("backward", 7, 300, torch.bfloat16, torch.bfloat16, _hw())
    assert p.chunked and 300 % p.block_n and p.n_iters > 1
    logits, target, weight = ce_inputs(7, 300, torch.bfloat16, DEVICE, weighted=True)
    check_cross_entropy(BACKEND, logits, target, weight, lse_square_scale=1e-3, label_smoothing=0.1,
                        reduction=reduction, softcap=20.0, return_z_loss=True, grad_scalar=0.5)  # fmt: skip


def test_cross_entropy_multi_row_tiles(few_cores):
    p = cross_entropy.plan("forward", 45, 20, torch.float32, None, _hw())
    assert p.block_m > 1 and p.n_iters > 1
    logits, target, _ = ce_inputs(45, 20, torch.float32, DEVICE)
    check_cross_entropy(BACKEND, logits, target, label_smoothing=0.2, reduction="sum")


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_flce_several_token_chunks(small_ub, reduction):
    assert fused_linear_cross_entropy.chunk_tokens(19, 8, 300) < 19  # the token loop runs several times
    x, w, target, bias, ce_weight = flce_inputs(19, 8, 300, torch.float32, DEVICE, bias=True, ce_weight=True)
    check_fused_linear_cross_entropy(BACKEND, x, w, target, bias, ce_weight, lse_square_scale=1e-3,
                                     label_smoothing=0.1, reduction=reduction, softcap=15.0, grad_scalar=2.0)  # fmt: skip


def test_divergences_chunked_and_multi_row(small_ub, few_cores):
    assert _divergence.plan(_divergence.JSD, 5, 700, torch.float32, torch.float32, _hw()).chunked
    s, t, labels = jsd_inputs(5, 700, torch.float32, DEVICE)
    check_jsd(BACKEND, s, t, labels, beta=0.3)
    p, q, labels = tvd_inputs(45, 20, torch.float32, DEVICE)
    assert _divergence.plan(_divergence.TVD, 45, 20, torch.float32, torch.float32, _hw()).block_m > 1
    for reduction in ("batchmean", "none"):
        check_tvd(BACKEND, p, q, labels, reduction=reduction)
    y_pred, y_true = kl_inputs(5, 700, torch.bfloat16, DEVICE, log_target=True)
    check_kl_div(BACKEND, y_pred, y_true, reduction="mean", log_target=True)


def test_fused_linear_jsd_several_token_chunks(small_ub):
    inputs = fljsd_inputs(19, 8, 12, 300, torch.float32, DEVICE)
    check_fused_linear_jsd(BACKEND, *inputs, jsd_beta=0.7, temperature=2.0)
