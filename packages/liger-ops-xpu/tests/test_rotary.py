"""XPU-specific paths of the rotary kernel (rotary.py): heads in several chunks for rope (both
layouts, a per-batch table), qwen2vl_mrope and llama4_rope (whole-head tiles with masked
columns), an output that feeds nothing. The tile is
lowered so shapes stay small; checked against the declarations' float64 oracles."""

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import llama4_rope, qwen2vl_mrope, rope

from liger_ops_xpu import BACKEND, hardware, rotary
from liger_ops_xpu.rotary import pair_bits, plan_rotary


@pytest.mark.parametrize("unsqueeze_dim", [1, 2])
def test_rope_heads_in_several_chunks(monkeypatch, device, unsqueeze_dim):
    # 8 columns per half, 16-element tiles: 2 heads per chunk, 5 q heads -> 3 chunks, 3 k heads -> 2.
    monkeypatch.setattr(hardware, "ROPE_TILE_ELEMENTS", 16)
    plan = plan_rotary(5, 3, 16)
    assert (plan.heads_block, plan.n_q_chunks, plan.n_k_chunks) == (2, 3, 2)
    args = rope.args(device, shape=(2, 5, 3, 3, 16), unsqueeze_dim=unsqueeze_dim, cos_batch=2)
    check(BACKEND, "rope", args)


def test_mrope_heads_in_several_chunks(monkeypatch, device):
    monkeypatch.setattr(hardware, "ROPE_TILE_ELEMENTS", 16)
    args = qwen2vl_mrope.args(device, shape=(2, 4, 3, 3, 16), dtype=torch.bfloat16, section=[2, 3, 3])
    check(BACKEND, "qwen2vl_mrope", args)


@pytest.mark.parametrize("words", (True, False), ids=("pair_words", "element_loads"))
def test_llama4_rope_heads_in_several_chunks(monkeypatch, device, words):
    # head_dim 12: 6 pairs in an 8-column half block, so the 16-column whole-head tile of the
    # interleaved form has 4 masked columns; 16-element tiles: 2 heads per chunk, 5 q heads -> 3
    # chunks (the last one half empty), 3 k heads -> 2. Both interleaved paths: pairs as words
    # (every aligned layout) and the element loads (the others), forced on the same shape.
    monkeypatch.setattr(hardware, "ROPE_TILE_ELEMENTS", 16)
    if not words:
        monkeypatch.setattr(rotary, "pair_bits", lambda *tensors: 0)
    plan = plan_rotary(5, 3, 12)
    assert (plan.half_block, plan.heads_block, plan.n_q_chunks, plan.n_k_chunks) == (8, 2, 3, 2)
    args = llama4_rope.args(device, shape=(2, 3, 5, 3, 12), dtype=torch.bfloat16, freqs_batch=2)
    check(BACKEND, "llama4_rope", args)
    check(BACKEND, "llama4_rope", llama4_rope.args(device, shape=(3, 17, 6, 1, 64), dtype=torch.float32))


def test_llama4_rope_pair_words_only_where_every_pair_is_one_aligned_word():
    x = torch.zeros(2, 3, 4, 16, dtype=torch.bfloat16)
    assert pair_bits(x, x) == 32
    assert pair_bits(x.float(), x.float()) == 64
    assert pair_bits(x, x.float()) == 0  # one word size for all four tensors
    assert pair_bits(x.double(), x.double()) == 0
    assert pair_bits(x[..., 1:15], x) == 0  # pairs start at an odd element
    assert pair_bits(x[..., ::2], x) == 0  # element stride 2
    wide = torch.zeros(2, 3, 4, 17, dtype=torch.bfloat16)[..., :16]
    assert pair_bits(wide, x) == 0  # odd head stride
    assert pair_bits(x.transpose(1, 2), x) == 32  # a transposed view of whole pairs


def test_rope_gradient_through_q_only(device):
    # k_out feeds nothing: backward gets no gradient for it and rotates zeros in its place.
    args = rope.args(device, shape=(1, 2, 1, 3, 8))
    _, grads = check(BACKEND, "rope", args, unused_outputs=("k_out",))
    assert not grads["k"].any()
