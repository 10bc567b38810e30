"""What fused linear cross-entropy's docstring says of its edges (behaviour pinned, not changed):
0.0 with zero gradients where ``F.cross_entropy`` gives nan, and a weight of another dtype cast to
the input's, its gradient back in its own dtype."""

from __future__ import annotations

import torch

from liger_core.ops.fused_linear_cross_entropy import fused_linear_cross_entropy


def test_no_target_to_count_is_zero_not_nan():
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(5, 4, requires_grad=True)
    loss = fused_linear_cross_entropy(x, w, torch.full((3,), -100))
    assert torch.isnan(torch.nn.functional.cross_entropy(x @ w.t(), torch.full((3,), -100)))
    assert loss.item() == 0.0
    loss.backward()
    assert not x.grad.any() and not w.grad.any()
    assert fused_linear_cross_entropy(torch.randn(0, 4), w.detach(), torch.zeros(0, dtype=torch.long)).item() == 0.0


def test_weight_of_another_dtype_is_cast_to_the_input_dtype():
    x = torch.randn(3, 4).bfloat16().requires_grad_()
    w = torch.randn(5, 4, requires_grad=True)
    target = torch.tensor([0, 2, 4])
    loss = fused_linear_cross_entropy(x, w, target)
    expected = torch.nn.functional.cross_entropy((x @ w.bfloat16().t()).float(), target)
    torch.testing.assert_close(loss, expected)
    loss.backward()
    assert x.grad.dtype == torch.bfloat16 and w.grad.dtype == torch.float32
