"""The vocabulary-major path of fused linear cross-entropy (tokens <= hidden): logits held in
grad_weight's storage, grad_weight written block by block, vocabulary descending."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from liger_core.conformance.fused_linear_cross_entropy_check import check_fused_linear_cross_entropy, make_inputs
from liger_ops_cuda import BACKEND, hardware
from liger_ops_cuda import fused_linear_cross_entropy as flce

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


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
def test_vocab_major_every_option(small_vt_tiles, monkeypatch, tokens, hidden, reduction):
    def no_chunks(*args, **kwargs):
        raise AssertionError("the chunked path ran; tokens <= hidden should take the vocabulary-major one")

    monkeypatch.setattr(flce, "_chunk_loop", no_chunks)
    x, w, t, b, cw = make_inputs(tokens, hidden, 157, torch.float32, DEVICE, seed=31, bias=True, ce_weight=True)
    check_fused_linear_cross_entropy(
        BACKEND, x, w, t, b, cw, lse_square_scale=1e-3, label_smoothing=0.1, reduction=reduction, softcap=6.0,
        return_z_loss=True, grad_scalar=0.5,
    )  # fmt: skip


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=str)
def test_vocab_major_plain(small_vt_tiles, dtype):
    x, w, t, _, _ = make_inputs(37, 48, 300, dtype, DEVICE, seed=32)
    check_fused_linear_cross_entropy(BACKEND, x, w, t)


class _Allocations(TorchDispatchMode):
    """Element counts of the tensors that factory ops create."""

    def __init__(self):
        super().__init__()
        self.sizes: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.__name__.startswith(("empty", "zeros", "ones", "full", "new_empty", "new_zeros")):
            self.sizes.append(out.numel())
        return out


def test_vocab_major_allocates_no_logits_buffer(small_vt_tiles):
    """Beyond grad_weight, nothing near the size of the logits: the chunked path would allocate a
    tokens x vocab buffer here (the whole input fits in one chunk)."""
    tokens = hidden = 40
    vocab = 400
    x, w, t, _, _ = make_inputs(tokens, hidden, vocab, torch.float32, DEVICE, seed=33)
    x.requires_grad_(True)
    w.requires_grad_(True)
    with _Allocations() as allocs:
        loss = flce.fused_linear_cross_entropy(x, w, t)
        loss.backward()
    big = [n for n in allocs.sizes if n >= tokens * vocab // 4]
    assert big == [vocab * hidden], (big, allocs.sizes)
