"""The `swiglu` op, declared once: the gated activation of the LLaMA-family MLPs,
``down_proj(swiglu(gate_proj(x), up_proj(x)))``."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from liger_core.bench import spec as B
from liger_core.op import Op
from liger_core.ops import _glu


def swiglu(a: torch.Tensor, b: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """SwiGLU: ``silu(a) * b`` elementwise, ``silu(a) = a * sigmoid(a)``.

    As in the models' eager code (``act_fn(gate) * up``), ``silu(a)`` is computed in float32
    and rounded to the input dtype before the multiply.

    Args:
        a: the gate, any shape, float32, bfloat16 or float16. Any layout (a copy is made
            if it is not contiguous).
        b: the up projection, ``a``'s shape, dtype and device.
        in_place: allow the backward pass to write ``grad_a`` and ``grad_b`` into the
            memory of ``a`` and ``b`` (saves two activation-sized buffers). Only the owner
            of both buffers may set it (``LigerSwiGLUMLP`` does, for the projections it
            created): after backward ``a`` and ``b`` hold gradients, and a second backward
            through the same graph is wrong. Without it, ``a`` and ``b`` are never modified.

    Returns:
        ``silu(a) * b`` with ``a``'s shape and dtype. Backward gives ``grad_a`` and ``grad_b``.
    """
    check_args(a, b, in_place)
    return math(a, b, in_place)


def check_args(a: torch.Tensor, b: torch.Tensor, in_place: bool) -> None:
    """Raise a clear error for arguments outside the contract. Backends call this first."""
    _glu.check_glu_args("swiglu", a, b, in_place)


def math(a: torch.Tensor, b: torch.Tensor, in_place: bool) -> torch.Tensor:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    return _glu.glu_math(F.silu, a, b)


args = _glu.args  # the sample builder (shared by the gated activations)

OP = Op(
    swiglu,
    since=(1, 2),
    math=math,
    grads=("a", "b"),
    sharding=_glu.SHARDING,
    samples=_glu.samples,
    smoke=_glu.SMOKE,
    error_sample=_glu.ERROR_SAMPLE,
    errors=_glu.ERRORS,
    checks=_glu.CHECKS,
    bench=_glu.bench_spec(
        F.silu,
        {
            B.LIGER_KERNEL: B.liger_kernel("liger_swiglu", "a", "b"),
            B.TORCH_NPU: B.torch_npu(lambda m, ab: m.npu_swiglu(ab, dim=-1), _glu.cat_ab),
        },
    ),
)
