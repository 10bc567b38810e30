"""CUDA-specific loss paths the shared suite does not reach with the default tile plans:
rows over several vocabulary tiles, several token chunks in the fused linear losses, the
deferred backward of reduction "none", in-place gradients, device-side gradient scaling,
and int64 row offsets."""

import pytest
import torch
import triton
import triton.language as tl

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
from liger_core.ops import cross_entropy as ce_contract
from liger_ops_cuda import BACKEND, hardware
from liger_ops_cuda._ce_kernels import _row_offset, scale_unless_one, tile_plan
from liger_ops_cuda.cross_entropy import LigerCrossEntropyFunction
from liger_ops_cuda.fused_linear_cross_entropy import chunk_tokens

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def small_tiles(monkeypatch):
    """Vocabulary tiles of 32: every row below spans several tiles with a ragged last one."""
    monkeypatch.setattr(hardware, "CE_BLOCK", 32)
    monkeypatch.setattr(hardware, "DIV_BLOCK", 32)


@pytest.fixture
def small_chunks(monkeypatch):
    """Token chunks of 8 (ragged last chunk) in the fused linear losses."""
    monkeypatch.setattr(hardware, "FLCE_CHUNK_ELEMENTS", 8 * 70)
    monkeypatch.setattr(hardware, "FLJSD_CHUNK_ELEMENTS", 8 * 70)
    monkeypatch.setattr(hardware, "FLCE_CHUNK_MULTIPLE", 4)


def test_tile_plan_and_chunks():
    assert tile_plan(128256)[:2] == (hardware.CE_BLOCK, triton.cdiv(128256, hardware.CE_BLOCK))
    assert tile_plan(5)[:2] == (8, 1)
    # 4096 x 128256 bf16 logits: 512-token chunks (128 MiB), a multiple of 128 tokens.
    assert chunk_tokens(4096, 128256) == 512
    assert chunk_tokens(3, 10) == 3 and chunk_tokens(10**6, 10**9) == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_rows_over_several_tiles(small_tiles, reduction, dtype):
    logits, target, weight = ce_inputs(13, 70, dtype, DEVICE, weighted=True, seed=21)
    check_cross_entropy(
        BACKEND, logits, target, weight, lse_square_scale=0.01, label_smoothing=0.15, reduction=reduction,
        softcap=6.0, return_z_loss=True, grad_scalar=1.5,
    )  # fmt: skip
    logits, target, _ = ce_inputs(9, 100, dtype, DEVICE, seed=22)
    check_cross_entropy(BACKEND, logits, target, reduction=reduction)


def test_cross_entropy_in_place_function(small_tiles):
    """The internal in-place variant (used on logits the caller hands over) writes the gradient
    into the logits' memory and equals the oracle."""
    logits, target, weight = ce_inputs(11, 70, torch.float32, DEVICE, weighted=True, seed=23)
    x = logits.clone().requires_grad_()
    buf = x.detach()
    loss, _ = LigerCrossEntropyFunction.apply(x, target, weight, -100, 1e-3, 0.1, "mean", None, True)
    loss.backward()
    assert torch.equal(buf, x.grad), "the gradient was not written into the logits' memory"
    x64 = logits.double().requires_grad_()
    ce_contract.math(x64, target, weight.double(), -100, 1e-3, 0.1, "mean", None)[0].backward()
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_flce_several_chunks_every_option(small_tiles, small_chunks, reduction):
    x, w, t, b, cw = flce_inputs(37, 16, 70, torch.float32, DEVICE, seed=24, bias=True, ce_weight=True)
    assert chunk_tokens(37, 70) == 8
    check_fused_linear_cross_entropy(
        BACKEND, x, w, t, b, cw, lse_square_scale=0.01, label_smoothing=0.1, reduction=reduction, softcap=5.0,
        return_z_loss=True, grad_scalar=0.75,
    )  # fmt: skip


@pytest.mark.parametrize("accum_dtype", [None, torch.float32], ids=["accum-none", "accum-fp32"])
def test_flce_bf16_several_chunks(small_chunks, accum_dtype):
    x, w, t, b, _ = flce_inputs(30, 16, 70, torch.bfloat16, DEVICE, seed=25, bias=True)
    check_fused_linear_cross_entropy(BACKEND, x, w, t, b, accum_dtype=accum_dtype)


def test_flce_deferred_none_without_input_grad(small_chunks):
    x, w, t, _, _ = flce_inputs(20, 8, 70, torch.float32, DEVICE, seed=26)
    check_fused_linear_cross_entropy(BACKEND, x, w, t, reduction="none", input_grad=False)


def test_flce_fp32_weight_with_bf16_input(small_chunks):
    """An fp32 lm_head with bf16 activations: the GEMMs run in bf16 (as autocast would) and
    grad_weight comes back in fp32."""
    x, w, t, _, _ = flce_inputs(20, 16, 70, torch.bfloat16, DEVICE, seed=27)
    w32 = w.float().requires_grad_()
    xi = x.clone().requires_grad_()
    BACKEND.ops["fused_linear_cross_entropy"](xi, w32, t).backward()
    assert w32.grad.dtype == torch.float32 and xi.grad.dtype == torch.bfloat16
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    ce_contract.math(x64 @ w64.t(), t, None, -100, 0.0, 0.0, "mean", None)[0].backward()
    torch.testing.assert_close(w32.grad.double(), w64.grad, rtol=2e-2, atol=2e-2 * float(w64.grad.abs().max()))


@pytest.mark.parametrize("reduction", ["batchmean", "sum", "mean", "none"])
def test_divergences_over_several_tiles(small_tiles, reduction):
    check_kl_div(BACKEND, *kl_inputs(7, 70, torch.float32, DEVICE, seed=28), reduction=reduction, grad_scalar=0.5)
    check_kl_div(BACKEND, *kl_inputs(7, 70, torch.bfloat16, DEVICE, log_target=True, seed=29), reduction, True)
    p, q, lab = tvd_inputs(9, 70, torch.float32, DEVICE, seed=30)
    check_tvd(BACKEND, p, q, lab, reduction, grad_scalar=3.0)
    check_tvd(BACKEND, p, q, None, reduction)


@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_jsd_over_several_tiles(small_tiles, beta):
    s, t, lab = jsd_inputs(9, 70, torch.float32, DEVICE, seed=31)
    check_jsd(BACKEND, s, t, lab, beta, grad_scalar=2.0)


@pytest.mark.parametrize("beta,temperature", [(0.5, 1.0), (0.0, 2.0), (1.0, 0.5)])
def test_fused_linear_jsd_several_chunks(small_tiles, small_chunks, beta, temperature):
    xs, ws, xt, wt, lab = fljsd_inputs(30, 8, 12, 70, torch.float32, DEVICE, seed=32)
    check_fused_linear_jsd(BACKEND, xs, ws, xt, wt, lab, beta, temperature=temperature, grad_scalar=0.5)


def test_scale_unless_one():
    g = torch.arange(10000, dtype=torch.float32, device=DEVICE)
    scale_unless_one(g, torch.ones(1, device=DEVICE))
    assert torch.equal(g, torch.arange(10000, dtype=torch.float32, device=DEVICE))
    scale_unless_one(g, torch.full((1,), -2.0, device=DEVICE))
    assert torch.equal(g, -2 * torch.arange(10000, dtype=torch.float32, device=DEVICE))


@triton.jit
def _offsets_kernel(ROWS, OUT, row_stride):
    i = tl.program_id(0)
    tl.store(OUT + i, _row_offset(tl.load(ROWS + i), row_stride))


def test_row_offsets_are_int64_beyond_2_31():
    """The row offset every loss kernel uses, at rows x stride far past 2**31 (4096 x 128256 fp32
    logits pass it at row 16744; 65536 tokens reach 8.4e9), computed by the kernels' own helper
    without allocating the tensor it would address."""
    rows = torch.tensor([0, 1, 16744, 65535, 2**31 // 128256 + 1], dtype=torch.int32, device=DEVICE)
    out = torch.zeros(rows.numel(), dtype=torch.int64, device=DEVICE)
    _offsets_kernel[(rows.numel(),)](rows, out, 128256)
    assert out.tolist() == [r * 128256 for r in rows.tolist()]
    assert max(out.tolist()) > 2**31


def test_loss_kernels_compile_for_h100():
    """The real Triton compiler (not the interpreter) builds a variant of every loss kernel path
    for sm_90a with its bundled ptxas; no GPU needed. `compile_loss_kernels.py --all` does all."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).with_name("compile_loss_kernels.py")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=900)
    if run.returncode == 2:
        pytest.skip(run.stderr.strip()[-300:] or "no NVIDIA Triton backend here")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "compiled" in run.stdout
