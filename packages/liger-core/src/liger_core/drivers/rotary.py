"""The rotary embeddings' driver (`liger_core.ops.rope`, `liger_core.ops.qwen2vl_mrope`,
`liger_core.ops.llama4_rope`): their autograd Functions over a vendor's kernels.

The three ops are one rotation of q and k by cos/sin tables: rope rotates half against half,
qwen2vl_mrope takes each column's table from its section (temporal, height, width), llama4_rope
rotates interleaved pairs by ``freqs_cis`` (its real and imaginary parts are the cos and sin
tables, read as views). Backward applies the rotation's transpose to the incoming gradients; no
gradient reaches the tables.

Layout: q and k reach the kernels as given, whatever their strides (LLaMA hands over
``(batch, heads, seq, head_dim)`` views of a ``(batch, seq, heads, head_dim)`` projection); a
vendor whose kernel cannot address some layout copies inside its kernel method. The outputs are
allocated here in the inputs' memory layout and the gradients in the outputs' layout, so the
views q and k came from take their gradients back without a copy. (This is what liger-ops-cuda
did; liger-ops-xpu allocated contiguous outputs and gradients, liger-ops-ascend its gradients in
the incoming gradients' layout: both kernels address any row strides of their outputs.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops.llama4_rope import check_args as check_llama4_rope_args
from liger_core.ops.qwen2vl_mrope import check_args as check_mrope_args
from liger_core.ops.rope import check_args as check_rope_args

PROTOCOL = 1


class RotaryKernels(Protocol):
    """What a vendor provides."""

    protocol: int

    def rotate(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        q_out: torch.Tensor,
        k_out: torch.Tensor,
        unsqueeze_dim: int,
        mrope_section: tuple[int, int, int] | None,
        interleaved: bool,
        backward: bool,
    ) -> None:
        """Write the rotation of ``q`` and ``k`` into ``q_out`` and ``k_out`` (with ``backward``:
        its transpose, q and k then being the incoming gradients).

        q and k are 4-D, ``(batch, heads, seq, head_dim)`` for ``unsqueeze_dim`` 1 or
        ``(batch, seq, heads, head_dim)`` for 2, any strides (possibly a transposed view);
        checked by the op's ``check_args``. ``q_out``/``k_out`` have q's and k's shapes and dtypes,
        unit stride along head_dim and any other strides. cos/sin, any strides:
        ``(batch or 1, seq, head_dim)``, or ``(3, batch or 1, seq, head_dim)`` with
        ``mrope_section`` (the three sections' column counts, summing to head_dim / 2); with
        ``interleaved`` (Llama 4), pairs are ``(x[2j], x[2j + 1])`` and the tables
        ``(batch or 1, seq, head_dim / 2)``, one value per pair. Math in float32."""


def _like(t: torch.Tensor) -> torch.Tensor:
    """An uninitialised tensor in ``t``'s memory layout where its head_dim is unit-stride, else contiguous."""
    out = torch.empty_like(t)
    return out if out.stride(-1) == 1 else torch.empty(t.shape, dtype=t.dtype, device=t.device)


def autograd_functions(kernels: RotaryKernels, module: str) -> dict[str, type[torch.autograd.Function]]:
    """The Functions over ``kernels``, defined in the vendor's ``module``, by op name:
    ``LigerRopeFunction`` (rope), ``LigerQwen2VLMRopeFunction`` (qwen2vl_mrope),
    ``LigerLlama4RopeFunction`` (llama4_rope), and under ``"rotary"`` the unchecked rotation they
    share, ``LigerRotaryFunction(q, k, cos, sin, mrope_section, unsqueeze_dim, interleaved=False)``."""
    check_protocol(kernels, "rotary", PROTOCOL)

    def rotate_forward(ctx, q, k, cos, sin, mrope_section, unsqueeze_dim, interleaved=False):
        q_out, k_out = _like(q), _like(k)
        kernels.rotate(q, k, cos, sin, q_out, k_out, unsqueeze_dim, mrope_section, interleaved, False)
        ctx.save_for_backward(cos, sin)
        ctx.rotation = (unsqueeze_dim, mrope_section, interleaved)
        ctx.layouts = (q_out.stride(), q.dtype, k_out.stride(), k.dtype)
        return q_out, k_out

    def backward(ctx, dq, dk):
        cos, sin = ctx.saved_tensors
        q_stride, q_dtype, k_stride, k_dtype = ctx.layouts
        # (Autograd materialises a missing output gradient as zeros: dq and dk are tensors.)
        grad_q = torch.empty_strided(dq.shape, q_stride, dtype=q_dtype, device=dq.device)
        grad_k = torch.empty_strided(dk.shape, k_stride, dtype=k_dtype, device=dk.device)
        kernels.rotate(dq, dk, cos, sin, grad_q, grad_k, *ctx.rotation, True)
        # Enough Nones for the widest Function (7 inputs); autograd ignores trailing extras.
        return grad_q, grad_k, None, None, None, None, None

    def rope_forward(ctx, q, k, cos, sin, position_ids, unsqueeze_dim):
        check_rope_args(q, k, cos, sin, position_ids, unsqueeze_dim)
        # position_ids is unused, as in transformers: cos/sin are already gathered per position.
        return rotate_forward(ctx, q, k, cos, sin, None, unsqueeze_dim)

    def mrope_forward(ctx, q, k, cos, sin, mrope_section: Sequence[int], unsqueeze_dim):
        check_mrope_args(q, k, cos, sin, mrope_section, unsqueeze_dim)
        return rotate_forward(ctx, q, k, cos, sin, tuple(int(s) for s in mrope_section), unsqueeze_dim)

    def llama4_forward(ctx, q, k, freqs_cis):
        check_llama4_rope_args(q, k, freqs_cis)
        # freqs_cis's real and imaginary parts, views as cos/sin tables (stride 2).
        table = torch.view_as_real(freqs_cis)
        # q/k are (batch, seq, heads, head_dim): the heads on axis 2, as rope's unsqueeze_dim=2.
        return rotate_forward(ctx, q, k, table[..., 0], table[..., 1], None, 2, True)

    return {
        "rotary": build_function("LigerRotaryFunction", module, rotate_forward, backward),
        "rope": build_function("LigerRopeFunction", module, rope_forward, backward),
        "qwen2vl_mrope": build_function("LigerQwen2VLMRopeFunction", module, mrope_forward, backward),
        "llama4_rope": build_function("LigerLlama4RopeFunction", module, llama4_forward, backward),
    }
