"""Conformance cases for `qwen2vl_mrope`."""

from __future__ import annotations

import itertools

import pytest
import torch

from liger_core.conformance import DTYPES, require_op
from liger_core.conformance.qwen2vl_mrope_check import check_qwen2vl_mrope, default_section, make_inputs

# (batch, q_heads, k_heads, seq, head_dim): Qwen2-VL-7B's heads (28 / 4) at head_dim 128,
# grouped-query at small sizes, odd heads and a half head_dim that is not a power of two.
SHAPES = [(1, 1, 1, 1, 8), (2, 4, 2, 7, 16), (1, 28, 4, 3, 128), (2, 3, 3, 9, 24)]
LAYOUTS = list(itertools.product((1, 2), (False, True)))  # unsqueeze_dim, transposed storage


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_qwen2vl_mrope_shapes(conformance_backend, conformance_device, shape, dtype):
    require_op(conformance_backend, "qwen2vl_mrope")
    q, k, cos, sin, dq, dk = make_inputs(*shape, dtype, conformance_device, transposed_storage=True)
    check_qwen2vl_mrope(conformance_backend, q, k, cos, sin, dq, dk, default_section(shape[-1]))


@pytest.mark.parametrize(
    "layout", LAYOUTS, ids=[f"{'bhsd' if u == 1 else 'bshd'}{'-transposed' if t else ''}" for u, t in LAYOUTS]
)
@pytest.mark.parametrize("cos_batch", (1, 2), ids=("cos-shared", "cos-per-batch"))
def test_qwen2vl_mrope_layouts(conformance_backend, conformance_device, layout, cos_batch):
    require_op(conformance_backend, "qwen2vl_mrope")
    unsqueeze_dim, transposed = layout
    q, k, cos, sin, dq, dk = make_inputs(
        2, 8, 2, 11, 32, torch.bfloat16, conformance_device, unsqueeze_dim, transposed, cos_batch=cos_batch
    )
    check_qwen2vl_mrope(conformance_backend, q, k, cos, sin, dq, dk, [4, 6, 6], unsqueeze_dim)


@pytest.mark.parametrize("section", ([8, 0, 0], [0, 8, 0], [0, 0, 8], [0, 3, 5], [5, 3, 0], [2, 2, 4]))
def test_qwen2vl_mrope_sections(conformance_backend, conformance_device, section):
    """Every section boundary, empty sections included; random tables so each axis differs."""
    require_op(conformance_backend, "qwen2vl_mrope")
    q, k, cos, sin, dq, dk = make_inputs(2, 4, 2, 5, 16, torch.float32, conformance_device, table="random")
    check_qwen2vl_mrope(conformance_backend, q, k, cos, sin, dq, dk, section)


def test_qwen2vl_mrope_tuple_section_and_float32_tables(conformance_backend, conformance_device):
    require_op(conformance_backend, "qwen2vl_mrope")
    q, k, cos, sin, dq, dk = make_inputs(1, 4, 2, 6, 32, torch.bfloat16, conformance_device, cos_dtype=torch.float32)
    check_qwen2vl_mrope(conformance_backend, q, k, cos, sin, dq, dk, (4, 6, 6))


def _other_device(device: str) -> str:
    return "meta" if device == "cpu" else "cpu"


BAD_INPUTS = [
    ("section_sum", ValueError, r"mrope_section must be a list of 3 .* summing to head_dim // 2 = 8; got \[2, 2, 2\]"),
    ("section_len", ValueError, r"mrope_section must be .*; got \[4, 4\]"),
    ("section_negative", ValueError, r"mrope_section must be .*; got \[10, -2, 0\]"),
    ("cos_3d", ValueError, r"cos must have shape \(3, batch or 1, seq, head_dim\) = \(3, 2 or 1, 6, 16\); got"),
    ("cos_axes", ValueError, r"sin must have shape .*got sin.shape=\(2, 2, 6, 16\)"),
    ("unsqueeze_dim", ValueError, r"unsqueeze_dim must be 1 .* or 2 .*; got 0"),
    ("mixed_devices", ValueError, r"one device.*q is on .*sin is on"),
    ("float64", TypeError, r"q must have dtype .*got float64"),
]  # fmt: skip


@pytest.mark.parametrize("case,error,pattern", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_qwen2vl_mrope_bad_input(conformance_backend, conformance_device, case, error, pattern):
    fn = require_op(conformance_backend, "qwen2vl_mrope")
    q, k, cos, sin, _, _ = make_inputs(2, 4, 2, 6, 16, torch.float32, conformance_device)
    section, unsqueeze_dim = [2, 3, 3], 1
    if case == "section_sum":
        section = [2, 2, 2]
    elif case == "section_len":
        section = [4, 4]
    elif case == "section_negative":
        section = [10, -2, 0]
    elif case == "cos_3d":
        cos = cos[0]
    elif case == "cos_axes":
        sin = sin[:2]
    elif case == "unsqueeze_dim":
        unsqueeze_dim = 0
    elif case == "mixed_devices":
        sin = sin.to(_other_device(conformance_device))
    elif case == "float64":
        q = q.double()
    with pytest.raises(error, match=pattern):
        fn(q, k, cos, sin, section, unsqueeze_dim)
