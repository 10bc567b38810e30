"""Mixture-of-experts MLP experts with the fused grouped-GEMM op."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from liger_core.functional import liger_fused_moe
from liger_core.nn.mlp import SILU_NAMES


class LigerExperts(nn.Module):
    """Drop-in for transformers 5.x's SwiGLU experts modules (``Qwen3MoeExperts``,
    ``MixtralExperts``, ``DeepseekV3Experts``, ``Qwen3VLMoeTextExperts``, ...): the same
    parameters (``gate_up_proj`` ``(E, 2I, H)``, ``down_proj`` ``(E, H, I)``), so a transformers
    state dict loads unchanged, and the same ``forward(hidden_states, top_k_index,
    top_k_weights)``.

    ``config`` needs ``hidden_size``, ``hidden_act`` (``"silu"``), the expert count
    (``num_experts``, ``num_local_experts`` or ``n_routed_experts``) and the expert width
    (``moe_intermediate_size``, else ``intermediate_size``), as the families name them.
    """

    def __init__(self, config: Any) -> None:
        super().__init__()
        act = getattr(config, "hidden_act", None)
        if act not in SILU_NAMES:
            raise ValueError(f"LigerExperts: config.hidden_act must be one of {SILU_NAMES}; got {act!r}")
        for name in ("num_experts", "num_local_experts", "n_routed_experts"):
            if getattr(config, name, None) is not None:
                self.num_experts = int(getattr(config, name))
                break
        else:
            raise ValueError("LigerExperts: config needs num_experts, num_local_experts or n_routed_experts")
        width = getattr(config, "moe_intermediate_size", None)
        self.intermediate_dim = int(width if width is not None else config.intermediate_size)
        self.hidden_dim = config.hidden_size
        self.gate_up_proj = nn.Parameter(torch.empty(self.num_experts, 2 * self.intermediate_dim, self.hidden_dim))
        self.down_proj = nn.Parameter(torch.empty(self.num_experts, self.hidden_dim, self.intermediate_dim))

    def forward(
        self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        # Tokens may come as (batch, seq, hidden): the op takes (tokens, hidden) rows.
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, shape[-1])
        top_k = top_k_index.shape[-1]
        out = liger_fused_moe(
            x, self.gate_up_proj, self.down_proj, top_k_index.reshape(-1, top_k), top_k_weights.reshape(-1, top_k)
        )
        return out.view(shape)
