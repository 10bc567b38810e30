"""The reference backend computes what the contracts say about rounding.

- `embedding`: a bfloat16 table's gradient rows are the incoming gradients summed in float32 and
  rounded once (torch's own embedding backward sums in bfloat16).
- `fused_moe_clamped_swiglu`: ``h`` is rounded to the input dtype before the clamp."""

from __future__ import annotations

import torch

from liger_core.ops.embedding import embedding
from liger_core.ops.fused_moe_clamped_swiglu import activation, fused_moe_clamped_swiglu


def test_embedding_bf16_gradient_is_summed_in_float32_and_rounded_once():
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(4, 16, generator=g).bfloat16().requires_grad_()
    indices = torch.randint(0, 2, (2048,), generator=g)  # long per-row sums on rows 0 and 1
    dy = torch.randn(2048, 16, generator=g).bfloat16()
    embedding(weight, indices, None).backward(dy)
    expected = torch.zeros(4, 16).index_add_(0, indices, dy.float()).bfloat16()
    assert torch.equal(weight.grad, expected)


def test_embedding_gradient_keeps_padding_row_zero():
    weight = torch.randn(5, 3, requires_grad=True)
    indices = torch.tensor([[0, 2, 2], [4, 0, 1]])
    embedding(weight, indices, -1).backward(torch.ones(2, 3, 3))
    assert weight.grad[:, 0].tolist() == [2.0, 1.0, 2.0, 0.0, 0.0]


def test_clamped_swiglu_reference_rounds_h_to_the_input_dtype_before_the_clamp():
    g = torch.Generator().manual_seed(1)
    tokens, hidden, inter, experts = 6, 32, 16, 2
    x = torch.randn(tokens, hidden, generator=g).bfloat16()
    gate_up = (torch.randn(experts, 2 * inter, hidden, generator=g) * 0.7).bfloat16()
    down = (torch.randn(experts, hidden, inter, generator=g) * 0.3).bfloat16()
    ids = torch.tensor([[0], [1], [0], [1], [0], [1]])
    weights = torch.ones(tokens, 1).bfloat16()
    out = fused_moe_clamped_swiglu(x, gate_up, down, ids, weights)
    expected = torch.zeros(tokens, hidden)
    for e in range(experts):  # the reference's per-expert order of operations, with h rounded
        h = (x.float() @ gate_up[e].float().t()).bfloat16().float()
        y = activation(h, 7.0, 1.702, 1.0, True) @ down[e].float().t()
        expected = expected + (ids == e).float() * y
    assert torch.equal(out, expected.bfloat16())
