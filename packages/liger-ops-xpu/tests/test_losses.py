"""XPU-specific paths of the 1.3 losses that the shared suite may not reach with the real caps:
several vocabulary blocks per row (ragged last block), several token chunks in the fused-linear
losses (scalar and per-row incoming gradients), several tiles in the divergence kernels. Caps
are lowered so shapes stay small."""

import pytest
import torch
from liger_core.conformance import (
    cross_entropy_check,
    fused_linear_cross_entropy_check,
    fused_linear_jsd_check,
    jsd_check,
    kl_div_check,
    tvd_check,
)

from liger_ops_xpu import BACKEND, hardware
from liger_ops_xpu.cross_entropy import plan_vocab
from liger_ops_xpu.fused_linear_cross_entropy import chunk_rows

DEVICE = "xpu" if hardware.xpu_available() else "cpu"

pytestmark = pytest.mark.filterwarnings("error:Conversion of an array with ndim > 0:DeprecationWarning")


@pytest.fixture
def small_vocab_blocks(monkeypatch):
    monkeypatch.setattr(hardware, "LOSS_VOCAB_BLOCK", 16)


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_cross_entropy_several_vocab_blocks(small_vocab_blocks, reduction, dtype):
    assert plan_vocab(70).n_blocks == 5
    logits, target, weight = cross_entropy_check.make_inputs(13, 70, dtype, DEVICE, weighted=True)
    cross_entropy_check.check_cross_entropy(
        BACKEND, logits, target, weight, lse_square_scale=1e-3, label_smoothing=0.2, reduction=reduction,
        softcap=5.0, return_z_loss=True, grad_scalar=0.5,
    )  # fmt: skip


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_flce_several_chunks(monkeypatch, small_vocab_blocks, reduction):
    monkeypatch.setattr(hardware, "FUSED_LINEAR_CHUNK_ELEMENTS", 4 * 50)
    assert chunk_rows(23, 50) == 4  # 6 chunks, the last one ragged
    x, w, t, b, cw = fused_linear_cross_entropy_check.make_inputs(
        23, 16, 50, torch.bfloat16, DEVICE, seed=2, bias=True, ce_weight=True
    )
    fused_linear_cross_entropy_check.check_fused_linear_cross_entropy(
        BACKEND, x, w, t, b, cw, lse_square_scale=1e-3, label_smoothing=0.1, reduction=reduction,
        accum_dtype=torch.float32, grad_scalar=0.5,
    )  # fmt: skip


@pytest.mark.parametrize("beta,dtype", [(0.0, torch.float32), (0.3, torch.bfloat16), (1.0, torch.float16)])
def test_fused_linear_jsd_several_chunks(monkeypatch, beta, dtype):
    # bf16/fp16: the fp32-output GEMM with tiles of 16 (several in every direction).
    monkeypatch.setattr(hardware, "FUSED_LINEAR_CHUNK_ELEMENTS", 3 * 40)
    for name in ("MATMUL_BLOCK_M", "MATMUL_BLOCK_N", "MATMUL_BLOCK_K"):
        monkeypatch.setattr(hardware, name, 16)
    xs, ws, xt, wt, lab = fused_linear_jsd_check.make_inputs(11, 24, 36, 40, dtype, DEVICE, seed=5)
    fused_linear_jsd_check.check_fused_linear_jsd(BACKEND, xs, ws, xt, wt, lab, beta, temperature=2.0, grad_scalar=2.0)


@pytest.fixture
def small_tiles(monkeypatch):
    """Divergence tiles of 2 rows x 16 columns: several tiles in both directions."""
    monkeypatch.setattr(hardware, "ELEMENTWISE_COL_BLOCK", 16)
    monkeypatch.setattr(hardware, "ELEMENTWISE_BLOCK", 32)


@pytest.mark.parametrize("reduction", ["none", "batchmean"])
def test_kl_div_several_tiles(small_tiles, reduction):
    y_pred, y_true = kl_div_check.make_inputs(7, 37, torch.bfloat16, DEVICE, log_target=True)
    kl_div_check.check_kl_div(BACKEND, y_pred, y_true, reduction=reduction, log_target=True, grad_scalar=0.5)


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_tvd_several_tiles_with_labels(small_tiles, reduction):
    p, q, labels = tvd_check.make_inputs(7, 37, torch.float32, DEVICE)
    tvd_check.check_tvd(BACKEND, p, q, labels, reduction=reduction)


def test_jsd_several_tiles_with_labels(small_tiles):
    s, t, labels = jsd_check.make_inputs(7, 37, torch.float32, DEVICE)
    jsd_check.check_jsd(BACKEND, s, t, labels, beta=0.7, grad_scalar=3.0)
