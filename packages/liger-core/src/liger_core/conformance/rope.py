"""Conformance cases for `rope`."""

from __future__ import annotations

import itertools

import pytest
import torch

from liger_core.conformance import DTYPES, require_op
from liger_core.conformance.rope_check import check_rope, make_inputs

# (batch, q_heads, k_heads, seq, head_dim): a single pair, grouped-query (fewer k heads),
# LLaMA-3-8B's heads, heads and half head_dim that are not powers of two, one k head (MQA),
# an empty sequence.
SHAPES = [(1, 1, 1, 1, 2), (2, 4, 2, 7, 16), (1, 32, 8, 3, 128), (2, 3, 3, 9, 24), (3, 6, 1, 17, 64), (2, 4, 2, 0, 8)]
LAYOUTS = list(itertools.product((1, 2), (False, True)))  # unsqueeze_dim, transposed storage


def _layout_id(layout):
    unsqueeze_dim, transposed = layout
    names = {1: "bhsd", 2: "bshd"}
    return names[unsqueeze_dim] + ("-transposed" if transposed else "")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_rope_shapes(conformance_backend, conformance_device, shape, dtype):
    require_op(conformance_backend, "rope")
    q, k, cos, sin, dq, dk = make_inputs(*shape, dtype, conformance_device, transposed_storage=True)
    check_rope(conformance_backend, q, k, cos, sin, dq, dk)


@pytest.mark.parametrize("layout", LAYOUTS, ids=[_layout_id(x) for x in LAYOUTS])
@pytest.mark.parametrize("cos_batch", (1, 2), ids=("cos-shared", "cos-per-batch"))
def test_rope_layouts(conformance_backend, conformance_device, layout, cos_batch):
    require_op(conformance_backend, "rope")
    unsqueeze_dim, transposed = layout
    q, k, cos, sin, dq, dk = make_inputs(
        2, 8, 2, 11, 32, torch.bfloat16, conformance_device, unsqueeze_dim, transposed, cos_batch=cos_batch
    )
    check_rope(conformance_backend, q, k, cos, sin, dq, dk, unsqueeze_dim=unsqueeze_dim)


@pytest.mark.parametrize("unsqueeze_dim", (1, 2))
def test_rope_position_ids_are_ignored(conformance_backend, conformance_device, unsqueeze_dim):
    """transformers' apply_rotary_pos_emb ignores position_ids: cos/sin are already per position."""
    fn = require_op(conformance_backend, "rope")
    q, k, cos, sin, dq, dk = make_inputs(2, 4, 2, 6, 16, torch.float32, conformance_device, unsqueeze_dim)
    position_ids = torch.arange(6, device=conformance_device).flip(0).expand(2, 6)
    check_rope(conformance_backend, q, k, cos, sin, dq, dk, position_ids, unsqueeze_dim)
    with_ids = fn(q, k, cos, sin, position_ids, unsqueeze_dim)
    without = fn(q, k, cos, sin, None, unsqueeze_dim)
    assert all(torch.equal(a, b) for a, b in zip(with_ids, without)), "rope: position_ids changed the result"


def test_rope_tables_with_different_halves(conformance_backend, conformance_device):
    """Both halves of cos/sin are used as given (transformers' formula), not only the first."""
    require_op(conformance_backend, "rope")
    q, k, cos, sin, dq, dk = make_inputs(2, 4, 2, 5, 16, torch.float32, conformance_device, table="random")
    check_rope(conformance_backend, q, k, cos, sin, dq, dk)


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16), ids=lambda d: str(d).removeprefix("torch."))
def test_rope_float32_tables_with_low_precision_qk(conformance_backend, conformance_device, dtype):
    require_op(conformance_backend, "rope")
    q, k, cos, sin, dq, dk = make_inputs(1, 4, 4, 7, 32, dtype, conformance_device, cos_dtype=torch.float32)
    check_rope(conformance_backend, q, k, cos, sin, dq, dk)


def test_rope_q_and_k_of_different_dtypes(conformance_backend, conformance_device):
    require_op(conformance_backend, "rope")
    q, k, cos, sin, dq, dk = make_inputs(1, 4, 2, 7, 32, torch.float32, conformance_device, k_dtype=torch.bfloat16)
    check_rope(conformance_backend, q, k, cos, sin, dq, dk)


@pytest.mark.parametrize("unsqueeze_dim", (1, 2))
def test_rope_views_of_a_fused_qkv_projection(conformance_backend, conformance_device, unsqueeze_dim):
    """q and k sliced out of one (batch, seq, (q_heads + 2 * k_heads) * head_dim) projection."""
    require_op(conformance_backend, "rope")
    batch, seq, qh, kh, d = 2, 5, 4, 2, 16
    gen = torch.Generator().manual_seed(3)
    qkv = torch.randn(batch, seq, (qh + 2 * kh) * d, generator=gen).to(conformance_device)
    q = qkv[..., : qh * d].view(batch, seq, qh, d)
    k = qkv[..., qh * d : (qh + kh) * d].view(batch, seq, kh, d)
    if unsqueeze_dim == 1:
        q, k = q.transpose(1, 2), k.transpose(1, 2)
    _, _, cos, sin, _, _ = make_inputs(batch, qh, kh, seq, d, torch.float32, conformance_device, cos_batch=batch)
    dq = torch.randn(q.shape, generator=gen).to(conformance_device)
    dk = torch.randn(k.shape, generator=gen).to(conformance_device)
    check_rope(conformance_backend, q, k, cos, sin, dq, dk, unsqueeze_dim=unsqueeze_dim)


def _other_device(device: str) -> str:
    return "meta" if device == "cpu" else "cpu"


BAD_INPUTS = [
    ("unsqueeze_dim", ValueError, r"unsqueeze_dim must be 1 .* or 2 .*; got 3"),
    ("q_3d", ValueError, r"q must be 4-D \(batch, heads, seq, head_dim\); got q.shape=\(2, 4, 6\)"),
    ("odd_head_dim", ValueError, r"head_dim must be even"),
    ("k_seq", ValueError, r"k must match q in batch, seq and head_dim.*k.shape=\(2, 2, 5, 16\)"),
    ("cos_shape", ValueError, r"cos must have shape \(batch or 1, seq, head_dim\) = \(2 or 1, 6, 16\); got .*8\)"),
    ("sin_batch", ValueError, r"sin must have shape .*got sin.shape=\(3, 6, 16\)"),
    ("mixed_devices", ValueError, r"one device.*q is on .*cos is on"),
    ("int_dtype", TypeError, r"k must have dtype float32, bfloat16, float16; got int64"),
    ("position_ids", TypeError, r"position_ids must be a torch.Tensor or None; got list"),
]  # fmt: skip


@pytest.mark.parametrize("case,error,pattern", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_rope_bad_input(conformance_backend, conformance_device, case, error, pattern):
    fn = require_op(conformance_backend, "rope")
    q, k, cos, sin, _, _ = make_inputs(2, 4, 2, 6, 16, torch.float32, conformance_device)
    position_ids, unsqueeze_dim = None, 1
    if case == "unsqueeze_dim":
        unsqueeze_dim = 3
    elif case == "q_3d":
        q = q[:, :, :, 0]
    elif case == "odd_head_dim":
        q, k, cos, sin = q[..., :15], k[..., :15], cos[..., :15], sin[..., :15]
    elif case == "k_seq":
        k = k[:, :, :5]
    elif case == "cos_shape":
        cos = cos[..., :8]
    elif case == "sin_batch":
        sin = sin.expand(3, 6, 16)
    elif case == "mixed_devices":
        cos = cos.to(_other_device(conformance_device))
    elif case == "int_dtype":
        k = k.long()
    elif case == "position_ids":
        position_ids = [0, 1, 2, 3, 4, 5]
    with pytest.raises(error, match=pattern):
        fn(q, k, cos, sin, position_ids, unsqueeze_dim)
