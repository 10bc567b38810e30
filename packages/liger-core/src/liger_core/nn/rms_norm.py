from __future__ import annotations

import torch
from torch import nn

from liger_core.functional import liger_fused_add_rms_norm, liger_modulated_rms_norm, liger_rms_norm
from liger_core.nn._params import init_weight
from liger_core.ops.rms_norm import CASTING_MODES


class LigerRMSNorm(nn.Module):
    """RMSNorm over the last dimension, a drop-in for the LLaMA/Gemma/Qwen norms.

    ``init_fn`` sets the initial weight (``"ones"``; ``"zeros"`` for Gemma, whose
    ``offset=1.0`` adds the 1 back). ``in_place=True`` lets backward reuse the incoming
    gradient's memory for ``grad_x``: only set it when nothing else reads that gradient.
    """

    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-6,
        offset: float = 0.0,
        casting_mode: str = "llama",
        init_fn: str = "ones",
        in_place: bool = False,
        elementwise_affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        who = type(self).__name__
        if casting_mode not in CASTING_MODES:
            raise ValueError(f"{who}: casting_mode must be one of {CASTING_MODES}; got {casting_mode!r}")
        self.hidden_size = hidden_size
        self.variance_epsilon = eps
        self.offset = offset
        self.casting_mode = casting_mode
        self.in_place = in_place
        weight = init_weight(who, hidden_size, init_fn, device, dtype)
        if elementwise_affine:
            self.weight = weight
        else:
            self.register_parameter("weight", None)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return liger_rms_norm(
            hidden_states, self.weight, self.variance_epsilon, self.offset, self.casting_mode, self.in_place
        )

    def extra_repr(self) -> str:
        return (
            f"{self.hidden_size}, eps={self.variance_epsilon}, offset={self.offset}, "
            f"casting_mode={self.casting_mode!r}, in_place={self.in_place}"
        )


class LigerFusedAddRMSNorm(LigerRMSNorm):
    """Residual add + RMSNorm of a pre-norm block: ``forward(hidden_states, residual)``
    returns ``(rms_norm(hidden_states + residual), hidden_states + residual)``.

    Arguments as `LigerRMSNorm`'s: ``init_fn`` ``"zeros"`` with ``offset=1.0`` for Gemma;
    ``in_place=True`` lets backward reuse the incoming gradient of the normed output for
    ``grad_x`` (only when nothing else reads that gradient).
    """

    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-6,
        offset: float = 0.0,
        casting_mode: str = "llama",
        init_fn: str = "ones",
        in_place: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(hidden_size, eps, offset, casting_mode, init_fn, in_place, True, device, dtype)

    def forward(self, hidden_states: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return liger_fused_add_rms_norm(
            hidden_states, residual, self.weight, self.variance_epsilon, self.offset, self.casting_mode, self.in_place
        )


class LigerModulatedRMSNorm(LigerRMSNorm):
    """RMSNorm with an adaptive scale and shift, ``(1 + scale) * RMSNorm(x) + shift`` (the AdaLN
    norm of Diffusion-Transformer blocks), under liger-kernel's name. The constructor is
    `LigerRMSNorm`'s; ``forward`` takes the modulation (see
    `liger_core.ops.modulated_rms_norm.modulated_rms_norm` for how it broadcasts)."""

    def forward(
        self, hidden_states: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor | None = None
    ) -> torch.Tensor:
        return liger_modulated_rms_norm(
            hidden_states,
            self.weight,
            scale,
            shift,
            self.variance_epsilon,
            self.offset,
            self.casting_mode,
            self.in_place,
        )
