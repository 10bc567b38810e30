"""Gated MLPs (LLaMA's SwiGLU, Gemma's GEGLU) with the fused activation."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from liger_core.functional import liger_geglu, liger_swiglu

# transformers' names for silu and for the tanh approximation of GELU.
SILU_NAMES = ("silu", "swish")
GELU_TANH_NAMES = ("gelu_pytorch_tanh", "gelu_new", "gelu_tanh")


class _GatedMLP(nn.Module):
    """``down_proj(act(gate_proj(x)) * up_proj(x))`` with HF's parameter names (no bias), so a
    transformers state dict loads unchanged."""

    def __init__(self, config: Any, intermediate_size: int | None = None) -> None:
        super().__init__()
        self.config = config
        self.hidden_size = config.hidden_size
        self.intermediate_size = intermediate_size if intermediate_size is not None else config.intermediate_size
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)

    def _gated(self, a: torch.Tensor, b: torch.Tensor, in_place: bool) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The projections' outputs are created here and read by nothing else (a Linear's
        # backward needs its input, not its output), so the activation's backward may reuse
        # their memory for its gradients.
        return self.down_proj(self._gated(self.gate_proj(x), self.up_proj(x), True))


class LigerSwiGLUMLP(_GatedMLP):
    """Drop-in for the LLaMA / Mistral / Qwen MLP: ``down_proj(silu(gate_proj(x)) * up_proj(x))``.

    ``config`` needs ``hidden_size``, ``intermediate_size`` and ``hidden_act`` (``"silu"``).
    """

    def __init__(self, config: Any, intermediate_size: int | None = None) -> None:
        act = getattr(config, "hidden_act", None)
        if act not in SILU_NAMES:
            raise ValueError(f"LigerSwiGLUMLP: config.hidden_act must be one of {SILU_NAMES}; got {act!r}")
        super().__init__(config, intermediate_size)

    def _gated(self, a: torch.Tensor, b: torch.Tensor, in_place: bool) -> torch.Tensor:
        return liger_swiglu(a, b, in_place)


class LigerGEGLUMLP(_GatedMLP):
    """Drop-in for the Gemma MLP: ``down_proj(gelu_tanh(gate_proj(x)) * up_proj(x))``.

    ``config`` needs ``hidden_size``, ``intermediate_size`` and the activation: Gemma's
    ``hidden_activation`` where the config has it (as transformers' Gemma MLP reads it),
    else ``hidden_act``; it must be the tanh approximation (``"gelu_pytorch_tanh"``).
    """

    def __init__(self, config: Any, intermediate_size: int | None = None) -> None:
        act = getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", None)
        if act not in GELU_TANH_NAMES:
            raise ValueError(
                f"LigerGEGLUMLP: the activation (config.hidden_activation or hidden_act) must be one of "
                f"{GELU_TANH_NAMES}; got {act!r}"
            )
        super().__init__(config, intermediate_size)

    def _gated(self, a: torch.Tensor, b: torch.Tensor, in_place: bool) -> torch.Tensor:
        return liger_geglu(a, b, in_place)
