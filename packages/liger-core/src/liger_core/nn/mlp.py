"""Gated MLPs (LLaMA's SwiGLU, Gemma's GEGLU) with the fused activation; Phi-3's fused gate-up
MLP; the tiled MLPs for long sequences."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from liger_core.functional import liger_fused_gate_up_swiglu, liger_geglu, liger_swiglu, liger_tiled_mlp

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


class LigerPhi3SwiGLUMLP(nn.Module):
    """Drop-in for transformers' Phi-3 MLP: one ``gate_up_proj`` (gate half first), then
    ``down_proj(silu(gate) * up)`` through `liger_fused_gate_up_swiglu` (no chunk copies; the
    gradient of the projection output in one buffer, written over it: the module owns it).

    ``config`` needs ``hidden_size``, ``intermediate_size`` and ``hidden_act`` (``"silu"``).
    """

    def __init__(self, config: Any) -> None:
        super().__init__()
        act = getattr(config, "hidden_act", None)
        if act not in SILU_NAMES:
            raise ValueError(f"LigerPhi3SwiGLUMLP: config.hidden_act must be one of {SILU_NAMES}; got {act!r}")
        self.config = config
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size
        self.gate_up_proj = nn.Linear(self.hidden_size, 2 * self.intermediate_size, bias=False)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(liger_fused_gate_up_swiglu(self.gate_up_proj(x), True))


class _TiledGatedMLP(nn.Module):
    """``down_proj(act(gate_proj(x)) * up_proj(x))`` with HF's parameter names (no bias), run by
    `liger_tiled_mlp` over ``num_shards`` tiles of tokens (None: ``ceil(tokens / hidden)``),
    recomputed in backward: the activation memory of one tile."""

    activation = ""

    def __init__(self, config: Any, num_shards: int | None = None, intermediate_size: int | None = None) -> None:
        super().__init__()
        if getattr(config, "mlp_bias", False):
            raise ValueError(f"{type(self).__name__}: config.mlp_bias must be False (the tiled MLP has no biases)")
        if num_shards is not None and (type(num_shards) is not int or num_shards < 1):
            raise ValueError(f"{type(self).__name__}: num_shards must be None or an int >= 1; got {num_shards!r}")
        self.config = config
        self.num_shards = num_shards
        self.hidden_size = config.hidden_size
        self.intermediate_size = intermediate_size if intermediate_size is not None else config.intermediate_size
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return liger_tiled_mlp(
            x, self.gate_proj.weight, self.up_proj.weight, self.down_proj.weight, self.activation, self.num_shards
        )


class LigerTiledSwiGLUMLP(_TiledGatedMLP):
    """Drop-in for the LLaMA / Mistral / Qwen MLP (transformers' ``LlamaMLP``) for long sequences:
    the SwiGLU MLP over tiles of tokens, recomputed in backward.

    ``config`` needs ``hidden_size``, ``intermediate_size`` and ``hidden_act`` (``"silu"``);
    ``num_shards`` as liger-kernel's (None: ``ceil(tokens / hidden)``).
    """

    activation = "silu"

    def __init__(self, config: Any, num_shards: int | None = None, intermediate_size: int | None = None) -> None:
        act = getattr(config, "hidden_act", None)
        if act not in SILU_NAMES:
            raise ValueError(f"LigerTiledSwiGLUMLP: config.hidden_act must be one of {SILU_NAMES}; got {act!r}")
        super().__init__(config, num_shards, intermediate_size)


class LigerTiledGEGLUMLP(_TiledGatedMLP):
    """Drop-in for the Gemma MLP for long sequences: the GEGLU (tanh GELU) MLP over tiles of
    tokens, recomputed in backward. The activation as `LigerGEGLUMLP` reads it."""

    activation = "gelu_tanh"

    def __init__(self, config: Any, num_shards: int | None = None, intermediate_size: int | None = None) -> None:
        act = getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", None)
        if act not in GELU_TANH_NAMES:
            raise ValueError(
                f"LigerTiledGEGLUMLP: the activation (config.hidden_activation or hidden_act) must be one of "
                f"{GELU_TANH_NAMES}; got {act!r}"
            )
        super().__init__(config, num_shards, intermediate_size)
