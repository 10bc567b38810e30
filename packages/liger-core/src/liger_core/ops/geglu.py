"""The `geglu` op, declared once: the gated activation of the Gemma MLPs,
``down_proj(geglu(gate_proj(x), up_proj(x)))``."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from liger_core.bench import spec as B
from liger_core.op import Op
from liger_core.ops import _glu

gelu_tanh = functools.partial(F.gelu, approximate="tanh")


def geglu(a: torch.Tensor, b: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """GEGLU with the tanh approximation of GELU: ``gelu_tanh(a) * b`` elementwise.

    ``gelu_tanh(a) = 0.5 * a * (1 + tanh(sqrt(2 / pi) * (a + 0.044715 * a**3)))``
    (transformers' ``gelu_pytorch_tanh``, ``torch.nn.functional.gelu(a, approximate="tanh")``).
    It is computed in float32 and rounded to the input dtype before the multiply.

    Args:
        a: the gate, any shape, float32, bfloat16 or float16. Any layout (a copy is made
            if it is not contiguous).
        b: the up projection, ``a``'s shape, dtype and device.
        in_place: allow the backward pass to write ``grad_a`` and ``grad_b`` into the
            memory of ``a`` and ``b``. Only the owner of both buffers may set it
            (``LigerGEGLUMLP`` does): after backward ``a`` and ``b`` hold gradients, and a
            second backward through the same graph is wrong. Without it, ``a`` and ``b``
            are never modified.

    Returns:
        ``gelu_tanh(a) * b`` with ``a``'s shape and dtype. Backward gives ``grad_a`` and ``grad_b``.
    """
    check_args(a, b, in_place)
    return math(a, b, in_place)


def check_args(a: torch.Tensor, b: torch.Tensor, in_place: bool) -> None:
    """Raise a clear error for arguments outside the contract. Backends call this first."""
    _glu.check_glu_args("geglu", a, b, in_place)


def math(a: torch.Tensor, b: torch.Tensor, in_place: bool) -> torch.Tensor:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    return _glu.glu_math(gelu_tanh, a, b)


args = _glu.args  # the sample builder (shared by the gated activations)

OP = Op(
    geglu,
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
        gelu_tanh,
        {
            B.LIGER_KERNEL: B.liger_kernel("liger_geglu", "a", "b"),
            # approximate=1: tanh GELU; activate_left: the GELU applies to the first half (a).
            B.TORCH_NPU: B.torch_npu(
                lambda m, ab: m.npu_geglu(ab, dim=-1, approximate=1, activate_left=True)[0], _glu.cat_ab
            ),
        },
    ),
)
