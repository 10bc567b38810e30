"""`liger_core.drivers._rows`: rows in memory order for dense permuted tensors, logical rows otherwise."""

import torch

from liger_core.drivers._rows import as_rows, in_layout, is_dense, memory_order_rows, rows_in_layout


def test_a_transposed_projection_is_read_where_it_lies():
    projection = torch.randn(2, 5, 3, 4)  # (batch, seq, heads, head_dim)
    q = projection.transpose(1, 2)  # (batch, heads, seq, head_dim), as Gemma-3's q_norm receives it
    rows = memory_order_rows(q)
    assert rows.shape == (30, 4) and rows.data_ptr() == projection.data_ptr()
    assert torch.equal(rows, projection.reshape(30, 4))
    out = torch.empty_like(q)  # keeps the dense input's strides: rows in the same order
    assert out.stride() == q.stride()
    memory_order_rows(out).copy_(rows * 2)
    assert torch.equal(out, q * 2)


def test_gradients_in_another_layout_are_copied_into_the_inputs_order():
    q = torch.randn(2, 5, 3, 4).transpose(1, 2)
    grad = torch.randn(2, 3, 5, 4)  # contiguous in (batch, heads, seq, head_dim)
    rows = rows_in_layout(grad, q.shape, q.stride())
    assert torch.equal(rows, grad.transpose(1, 2).reshape(30, 4))
    same = torch.empty_like(q).normal_()
    assert rows_in_layout(same, q.shape, q.stride()).data_ptr() == same.data_ptr()  # q's order already: no copy
    back = in_layout(rows.contiguous(), q.shape, q.stride())
    assert back.stride() == q.stride() and torch.equal(back, grad)


def test_gaps_overlaps_and_strided_columns_are_not_dense():
    q = torch.randn(2, 5, 3, 4).transpose(1, 2)
    assert memory_order_rows(q[..., :2]) is None  # gaps between rows
    assert not is_dense(q[:, :, ::2])
    assert memory_order_rows(torch.randn(3, 1, 4).expand(3, 2, 4)) is None  # rows repeated
    assert memory_order_rows(torch.randn(4, 3).t()) is None  # strided columns
    assert memory_order_rows(torch.empty(0, 4)) is None
    strided = torch.randn(4, 3).t()
    rows = as_rows(strided)  # the logical-order fallback copies
    assert rows.is_contiguous() and torch.equal(rows, strided)
