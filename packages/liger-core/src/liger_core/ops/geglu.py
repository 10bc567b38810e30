"""The `geglu` op: its contract, argument checks and PyTorch reference.

The gated activation of the Gemma MLPs: ``down_proj(geglu(gate_proj(x), up_proj(x)))``.
"""

from __future__ import annotations

import torch

from liger_core.ops._glu import check_glu_args


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
    raise NotImplementedError("contract only: call liger_core.functional.liger_geglu")


def check_args(a: torch.Tensor, b: torch.Tensor, in_place: bool) -> None:
    """Raise a clear error for arguments outside the contract. Backends call this first."""
    check_glu_args("geglu", a, b, in_place)


def math(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    dtype = a.dtype
    compute = a if dtype == torch.float64 else a.float()
    return torch.nn.functional.gelu(compute, approximate="tanh").to(dtype) * b


def reference(a: torch.Tensor, b: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    check_args(a, b, in_place)
    return math(a, b)
