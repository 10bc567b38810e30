"""What the tests of TRL's own loss code share (test_preference_trl.py, test_kto_trl.py,
test_trainers.py): the optional-package gate, and the stand-ins a trainer's loss method runs on
(a causal LM whose backbone returns fixed hidden states, and the accelerator's few methods)."""

from __future__ import annotations

import contextlib
import importlib
import os
import types

import pytest
import torch


def need(module: str):
    """``module``, imported; missing: a skip, or a failure under ``LIGER_HF_TRAINERS=1``."""
    if os.environ.get("LIGER_HF_TRAINERS") == "1":
        return importlib.import_module(module)
    return pytest.importorskip(module)


class StandInBackbone(torch.nn.Module):
    """Returns fixed hidden states: ``hidden`` (a tensor) for any ``input_ids`` of its
    ``(batch, seq)``, or (a dict) those registered for the ``input_ids`` tensor it is called with
    (keyed by ``data_ptr()``), for a trainer that runs a model on two batches."""

    def __init__(self, hidden: torch.Tensor | dict[int, torch.Tensor]) -> None:
        super().__init__()
        self.hidden = hidden

    def forward(self, input_ids=None, **_):
        hidden = self.hidden if isinstance(self.hidden, torch.Tensor) else self.hidden[input_ids.data_ptr()]
        assert input_ids.shape == hidden.shape[:2]
        return types.SimpleNamespace(last_hidden_state=hidden)


class StandInCausalLM(torch.nn.Module):
    """What `add_fused_lm_head` patches: a config, a backbone (``base_model``), an lm_head."""

    is_gradient_checkpointing = False

    def __init__(
        self, hidden: torch.Tensor | dict[int, torch.Tensor], weight: torch.Tensor, bias: torch.Tensor | None
    ) -> None:
        super().__init__()
        from transformers import PretrainedConfig

        self.config = PretrainedConfig()
        self.base_model = StandInBackbone(hidden)
        self.lm_head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
        with torch.no_grad():
            self.lm_head.weight.copy_(weight)
            if bias is not None:
                self.lm_head.bias.copy_(bias)

    def get_output_embeddings(self):
        return self.lm_head


class StandInAccelerator:
    """One CPU process: gathering and unwrapping change nothing, no autocast."""

    device = torch.device("cpu")

    def gather_for_metrics(self, t):
        return t

    def gather(self, t):
        return t

    def unwrap_model(self, m):
        return m

    def autocast(self):
        return contextlib.nullcontext()
