"""fused_linear_cross_entropy's own paths: several token chunks, the row forward writing the
gradient over a chunk's logits, the deferred backward of reduction "none", fp32 lm_head with
bf16 activations, and the vocabulary-major path (tokens <= hidden: logits held in grad_weight's
storage, grad_weight written block by block, vocabulary descending)."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from liger_core.conformance.check import check, make_args
from liger_core.ops import cross_entropy as ce_contract
from liger_ops_cuda import fused_linear_cross_entropy as flce
from liger_ops_cuda import hardware
from liger_ops_cuda._tiling import plan_chunks


def flce_args(device, tokens, hidden, vocab, dtype=torch.float32, **params):
    return make_args("fused_linear_cross_entropy", device, shape=(tokens, hidden, vocab), dtype=dtype, **params)


@pytest.fixture
def small_chunks(monkeypatch):
    """Token chunks of 8 (ragged last chunk)."""
    monkeypatch.setattr(hardware, "FUSED_LINEAR_MEMORY_BUDGET", 8 * 70 * 4)  # 8 rows of fp32 logits
    monkeypatch.setattr(hardware, "FUSED_LINEAR_ROW_MULTIPLE", 4)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_row_programs_in_place_gradient(backend, device, row_programs, small_chunks, reduction):
    """Through the row forward (bias, class weights, every option): `cross_entropy_forward`
    writes the gradient over the chunk's logits after the row kernel has read them."""
    args = flce_args(device, 21, 16, 70, seed=46, bias=True, weighted=True)
    check(
        backend, "fused_linear_cross_entropy", args, grad_scalar=0.75, lse_square_scale=0.01, label_smoothing=0.1,
        reduction=reduction, softcap=5.0, return_z_loss=True,
    )  # fmt: skip


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_several_chunks_every_option(backend, device, monkeypatch, small_chunks, reduction):
    monkeypatch.setattr(hardware, "CE_BLOCK", 32)  # rows over several vocabulary tiles
    assert plan_chunks(37, 70, bytes_per_logit=4) == 8
    args = flce_args(device, 37, 16, 70, seed=24, bias=True, weighted=True)
    check(
        backend, "fused_linear_cross_entropy", args, grad_scalar=0.75, lse_square_scale=0.01, label_smoothing=0.1,
        reduction=reduction, softcap=5.0, return_z_loss=True,
    )  # fmt: skip


@pytest.mark.parametrize("accum_dtype", [None, torch.float32], ids=["accum-none", "accum-fp32"])
def test_bf16_several_chunks(backend, device, small_chunks, accum_dtype):
    args = flce_args(device, 30, 16, 70, torch.bfloat16, seed=25, bias=True)
    check(backend, "fused_linear_cross_entropy", args, accum_dtype=accum_dtype)


def test_deferred_none_without_input_grad(backend, device, small_chunks):
    args = flce_args(device, 20, 8, 70, seed=26)
    check(backend, "fused_linear_cross_entropy", args, frozen=("input",), reduction="none")


def test_fp32_weight_with_bf16_input(backend, device, small_chunks):
    """An fp32 lm_head with bf16 activations: the GEMMs run in bf16 (as autocast would) and
    grad_weight comes back in fp32."""
    args = flce_args(device, 20, 16, 70, torch.bfloat16, seed=27)
    x, w, t = args["input"], args["weight"], args["target"]
    w32 = w.float().requires_grad_()
    xi = x.clone().requires_grad_()
    backend.op("fused_linear_cross_entropy")(
        xi, w32, t, None, None, -100, 0.0, 0.0, "mean", None, False, None
    ).backward()
    assert w32.grad.dtype == torch.float32 and xi.grad.dtype == torch.bfloat16
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    ce_contract.math(x64 @ w64.t(), t, None, -100, 0.0, 0.0, "mean", None)[0].backward()
    torch.testing.assert_close(w32.grad.double(), w64.grad, rtol=2e-2, atol=2e-2 * float(w64.grad.abs().max()))


# -- the vocabulary-major path --------------------------------------------------------------------


@pytest.fixture
def small_vt_tiles(monkeypatch):
    """Several token tiles, vocabulary groups and grad_weight blocks at test sizes."""
    monkeypatch.setattr(hardware, "FLCE_VT_BLOCK_V", 16)
    monkeypatch.setattr(hardware, "FLCE_VT_BLOCK_T", 16)
    monkeypatch.setattr(hardware, "FLCE_CHUNK_MULTIPLE", 16)
    monkeypatch.setattr(hardware, "FLCE_VT_GRAD_WEIGHT_BLOCK_ELEMENTS", 16 * 40)


def test_path_choice():
    x = torch.zeros(8, 16)
    assert flce._vocab_major_fits(x, torch.empty(50, 16))
    assert flce._vocab_major_fits(torch.zeros(16, 16), torch.empty(50, 16))  # tokens == hidden
    assert not flce._vocab_major_fits(torch.zeros(17, 16), torch.empty(50, 16))  # more tokens than hidden
    assert not flce._vocab_major_fits(x.bfloat16(), torch.empty(50, 16))  # fp32 accumulation of bf16
    assert not flce._vocab_major_fits(x, None)  # no weight gradient wanted
    assert not flce._vocab_major_fits(torch.zeros(0, 16), torch.empty(50, 16))


@pytest.mark.parametrize(
    "tokens,hidden",
    [
        (40, 40),  # tokens == hidden: every grad_weight block overlaps its own source rows
        (23, 40),  # fewer: only the first blocks do
        (3, 40),  # one token tile
    ],
)
@pytest.mark.parametrize("reduction", ("mean", "sum"))
def test_vocab_major_every_option(backend, device, small_vt_tiles, monkeypatch, tokens, hidden, reduction):
    def no_chunks(*args, **kwargs):
        raise AssertionError("the chunked path ran; tokens <= hidden should take the vocabulary-major one")

    monkeypatch.setattr(flce, "_chunk_loop", no_chunks)
    args = flce_args(device, tokens, hidden, 157, seed=31, bias=True, weighted=True)
    check(
        backend, "fused_linear_cross_entropy", args, grad_scalar=0.5, lse_square_scale=1e-3, label_smoothing=0.1,
        reduction=reduction, softcap=6.0, return_z_loss=True,
    )  # fmt: skip


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=str)
def test_vocab_major_plain(backend, device, small_vt_tiles, dtype):
    check(backend, "fused_linear_cross_entropy", flce_args(device, 37, 48, 300, dtype, seed=32))


class _FactoryAllocations(TorchDispatchMode):
    """Element counts of the tensors that factory ops create."""

    def __init__(self):
        super().__init__()
        self.sizes: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.__name__.startswith(("empty", "zeros", "ones", "full", "new_empty", "new_zeros")):
            self.sizes.append(out.numel())
        return out


def test_vocab_major_allocates_no_logits_buffer(backend, device, small_vt_tiles):
    """Beyond grad_weight, nothing near the size of the logits: the chunked path would allocate a
    tokens x vocab buffer here (the whole input fits in one chunk)."""
    tokens = hidden = 40
    vocab = 400
    args = flce_args(device, tokens, hidden, vocab, seed=33)
    x, w = args["input"].requires_grad_(True), args["weight"].requires_grad_(True)
    with _FactoryAllocations() as allocs:
        loss = backend.op("fused_linear_cross_entropy")(
            x, w, args["target"], None, None, -100, 0.0, 0.0, "mean", None, False, None
        )
        loss.backward()
    big = [n for n in allocs.sizes if n >= tokens * vocab // 4]
    assert big == [vocab * hidden], (big, allocs.sizes)
