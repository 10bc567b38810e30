"""The causal-LM forward the patch installs: fused linear cross-entropy instead of logits under training.

Same inputs and outputs as the stock ``<Family>ForCausalLM.forward`` of transformers 5.x. With
labels in training mode (or ``skip_logits=True``) the final hidden states go straight into
``liger_fused_linear_cross_entropy`` with the LM head's weight, so the ``(tokens, vocab)``
logits are never materialised; ``logits`` is then None. Otherwise (evaluation, generation,
``skip_logits=False``) the logits are computed and the stock loss function is used.

The loss matches the stock one: labels shifted left by one (or ``shift_labels`` as given),
mean over non-ignored tokens, or the sum divided by ``num_items_in_batch`` when the trainer
passes it (gradient accumulation). Gemma 2/3's final-logit soft-capping and Granite's logit
scaling are applied inside the fused loss; MoE families add the router's load-balancing loss.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.nn import functional as torch_F

from liger_core.transformers.layers import require_op


@dataclass(frozen=True)
class LogitsSpec:
    """How a family turns final hidden states into logits, beyond ``lm_head``."""

    softcap_attr: str | None = None  # config attribute: logits = cap * tanh(logits / cap)
    scale_attr: str | None = None  # config attribute: logits = logits / scale
    moe_module: str | None = None  # module holding load_balancing_loss_func (MoE families)


def _slice(hidden_states: torch.Tensor, logits_to_keep: int | torch.Tensor) -> torch.Tensor:
    if isinstance(logits_to_keep, int):
        return hidden_states if logits_to_keep == 0 else hidden_states[:, -logits_to_keep:, :]
    return hidden_states[:, logits_to_keep, :]


def _head_and_loss(
    self,
    spec: LogitsSpec,
    hidden_states: torch.Tensor,
    labels: torch.Tensor | None,
    logits_to_keep: int | torch.Tensor,
    skip_logits: bool | None,
    kwargs: dict,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    hidden_states = _slice(hidden_states, logits_to_keep)
    shift_labels = kwargs.get("shift_labels")
    has_targets = labels is not None or shift_labels is not None
    if skip_logits is None:
        skip_logits = self.training and has_targets
    if skip_logits and not has_targets:
        raise ValueError("skip_logits=True needs labels (or shift_labels): there is nothing else to return")

    softcap = getattr(self.config, spec.softcap_attr, None) if spec.softcap_attr else None
    scale = getattr(self.config, spec.scale_attr, None) if spec.scale_attr else None

    if not skip_logits:
        logits = self.lm_head(hidden_states)
        if scale is not None:
            logits = logits / scale
        if softcap is not None:
            logits = torch.tanh(logits / softcap) * softcap
        loss = None
        if has_targets:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return loss, logits

    ignore_index = kwargs.get("ignore_index", -100)
    if shift_labels is None:
        # As the stock loss: pad one ignored position and shift, so hidden states need no slicing copy.
        shift_labels = torch_F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    hidden = hidden_states.reshape(-1, hidden_states.shape[-1])
    if scale is not None:
        hidden = hidden / scale  # (h / s) @ W^T == (h @ W^T) / s
    num_items = kwargs.get("num_items_in_batch")
    loss = require_op("liger_fused_linear_cross_entropy")(
        hidden,
        self.lm_head.weight,
        shift_labels.reshape(-1).to(hidden.device),
        bias=self.lm_head.bias,
        ignore_index=ignore_index,
        reduction="mean" if num_items is None else "sum",
        softcap=softcap,
    )
    if num_items is not None:
        loss = loss / (num_items.to(loss.device) if torch.is_tensor(num_items) else num_items)
    return loss, None


def _can_return_tuple(fn: Callable) -> Callable:
    # The stock forwards turn the output into a tuple for return_dict=False; do the same.
    try:
        from transformers.utils.generic import can_return_tuple
    except ImportError:  # pragma: no cover - every transformers 5.x has it
        return fn
    return can_return_tuple(fn)


def make_forward(spec: LogitsSpec) -> Callable:
    """The Liger causal-LM forward for one family (dense or MoE)."""
    from transformers.modeling_outputs import CausalLMOutputWithPast, MoeCausalLMOutputWithPast

    if spec.moe_module is None:

        def forward(
            self,
            input_ids: torch.LongTensor | None = None,
            attention_mask: torch.Tensor | None = None,
            position_ids: torch.LongTensor | None = None,
            past_key_values=None,
            inputs_embeds: torch.Tensor | None = None,
            labels: torch.LongTensor | None = None,
            use_cache: bool | None = None,
            logits_to_keep: int | torch.Tensor = 0,
            skip_logits: bool | None = None,
            **kwargs,
        ) -> CausalLMOutputWithPast:
            outputs = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=past_key_values,
                inputs_embeds=inputs_embeds,
                use_cache=use_cache,
                **kwargs,
            )
            loss, logits = _head_and_loss(
                self, spec, outputs.last_hidden_state, labels, logits_to_keep, skip_logits, kwargs
            )
            return CausalLMOutputWithPast(
                loss=loss,
                logits=logits,
                past_key_values=outputs.past_key_values,
                hidden_states=outputs.hidden_states,
                attentions=outputs.attentions,
            )

    else:
        balancing_loss = importlib.import_module(spec.moe_module).load_balancing_loss_func

        def forward(
            self,
            input_ids: torch.LongTensor | None = None,
            attention_mask: torch.Tensor | None = None,
            position_ids: torch.LongTensor | None = None,
            past_key_values=None,
            inputs_embeds: torch.Tensor | None = None,
            labels: torch.LongTensor | None = None,
            use_cache: bool | None = None,
            output_router_logits: bool | None = None,
            logits_to_keep: int | torch.Tensor = 0,
            skip_logits: bool | None = None,
            **kwargs,
        ) -> MoeCausalLMOutputWithPast:
            if output_router_logits is None:
                output_router_logits = self.config.output_router_logits
            outputs = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=past_key_values,
                inputs_embeds=inputs_embeds,
                use_cache=use_cache,
                output_router_logits=output_router_logits,
                **kwargs,
            )
            loss, logits = _head_and_loss(
                self, spec, outputs.last_hidden_state, labels, logits_to_keep, skip_logits, kwargs
            )
            aux_loss = None
            if output_router_logits:
                aux_loss = balancing_loss(
                    outputs.router_logits, self.num_experts, self.num_experts_per_tok, attention_mask
                )
                if loss is not None:
                    loss = loss + self.router_aux_loss_coef * aux_loss.to(loss.device)
            return MoeCausalLMOutputWithPast(
                loss=loss,
                aux_loss=aux_loss,
                logits=logits,
                past_key_values=outputs.past_key_values,
                hidden_states=outputs.hidden_states,
                attentions=outputs.attentions,
                router_logits=outputs.router_logits,
            )

    forward = _can_return_tuple(forward)
    forward._liger_forward = True
    return forward
