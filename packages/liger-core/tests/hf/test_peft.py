"""Patched models under PEFT LoRA: trained stock and patched from the same weights and adapters, they agree.

- LoRA on the attention and MLP projections: the norms, the MLPs (their projections now LoRA
  layers) and the fused linear cross-entropy stay Liger's, no logits under training.
- LoRA on the LM head itself: the head computes ``W h + s B A h``, which the fused loss (one
  weight matrix) does not; the forward runs stock (logits materialised) and warns with that reason.

Compared at fp32 tolerances (summation order only): the loss of every step and every trainable
(LoRA) parameter after a few AdamW steps; the frozen base weights must not move.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from hf_models import SIZES, batches, build, initial_state

from liger_core.transformers import LigerStockFallbackWarning, apply_liger_kernel_to_llama, layers
from liger_core.transformers.layers import is_liger_class

peft = pytest.importorskip("peft", reason="peft is not installed (the hf nox sessions install it)")

TINY = SIZES["tiny"]
STEPS = 3
LR = 3e-3
LOSS_TOL = dict(atol=1e-5, rtol=1e-5)
PARAM_TOL = dict(atol=1e-5, rtol=1e-4)
TARGETS = {
    "projections": ["q_proj", "v_proj", "gate_proj", "up_proj", "down_proj"],
    "lm_head": ["q_proj", "v_proj", "lm_head"],
}


def _lora(model, targets: list[str]):
    # init_lora_weights=False: B starts random, not zero, so the adapters change the loss from the first step.
    config = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=targets, init_lora_weights=False)
    torch.manual_seed(3)
    return peft.get_peft_model(model, config)


def _train(model, device: str) -> tuple[list[float], list[bool], dict[str, torch.Tensor]]:
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LR, eps=1e-6)
    model.train()
    losses, fused = [], []
    for batch in batches(TINY, STEPS, device):
        out = model(**batch)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(out.loss.item())
        fused.append(out.logits is None)
    return losses, fused, {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("where", list(TARGETS))
def test_lora_matches_stock(where, monkeypatch, device):
    # Stock first, before the class-level patch exists (it would reach a stock model's forward and RoPE too).
    stock = build("llama", TINY, torch.float32, device)
    state = initial_state(stock)
    ref_losses, ref_fused, ref_params = _train(_lora(stock, TARGETS[where]), device)
    assert not any(ref_fused), "the stock reference must compute logits"

    apply_liger_kernel_to_llama()
    patched = _lora(build("llama", TINY, torch.float32, device, state), TARGETS[where])
    base = patched.get_base_model()
    layer = base.model.layers[0]
    for module in (base.model.norm, layer.input_layernorm, layer.mlp):
        assert is_liger_class(type(module)), f"{type(module).__name__} lost its Liger class under PEFT"
    monkeypatch.setattr(layers, "_WARNED", set())  # each reason warns once per process: let this test see its own
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LigerStockFallbackWarning)
        losses, fused, params = _train(patched, device)
    fallbacks = [str(w.message) for w in caught if issubclass(w.category, LigerStockFallbackWarning)]
    if where == "lm_head":
        # The LoRA head's extra term is not in one weight matrix: stock loss, said once, with the reason.
        assert not any(fused)
        assert fallbacks and all("lm_head is a Linear (peft.tuners.lora.layer)" in m for m in fallbacks), fallbacks
    else:
        assert all(fused), "training with labels under LoRA must take the fused loss (no logits)"
        assert fallbacks == []
    torch.testing.assert_close(losses, ref_losses, **LOSS_TOL)
    assert params.keys() == ref_params.keys()
    trainable = {n for n, p in patched.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    for name, value in ref_params.items():
        torch.testing.assert_close(params[name], value, **PARAM_TOL, msg=name)
        if name not in trainable:
            base_name = name.replace("base_model.model.", "", 1).replace(".base_layer", "")
            torch.testing.assert_close(value, state[base_name], atol=0, rtol=0, msg=f"{name} moved")
