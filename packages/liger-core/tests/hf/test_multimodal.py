"""Multimodal families: the patched model equals stock with images through the vision tower.

For each family of `hf_models.MULTIMODAL_FAMILIES`, a tiny image-text-to-text model (random
weights, a 2-layer vision tower) is built stock and, after the family's patch, built again with
the stock weights and converted live (`apply_liger_kernel_to_instance`: the vision tower's
``torch.nn.LayerNorm`` modules, a LLaVA-like wrapper's language model). Random pixel inputs run
through both: eval logits; in training with labels the loss (the fused forward, no logits) and
every gradient, the vision tower's included; greedy generation with the image. Tolerances as
test_families.py (float32, kernels and stock differ in summation order only).
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from hf_models import (
    MULTIMODAL_FAMILIES,
    SIZES,
    auto_class,
    biting_softcap,
    mini_config,
    model_inputs,
    require_family,
    stock_transformers,
)

from liger_core.transformers import LigerStockFallbackWarning, apply_liger_kernel_to_instance, layers
from liger_core.transformers import monkey_patch as mp

TINY = SIZES["tiny"]
BATCH, SEQ = 2, 12
OUT_TOL = {"atol": 2e-5, "rtol": 1e-5}
GRAD_TOL = {"atol": 5e-5, "rtol": 1e-3}


@pytest.fixture(autouse=True)
def _every_fallback_warns(monkeypatch):
    monkeypatch.setattr(layers, "_WARNED", set())


def _as_stock(config):
    return stock_transformers(lambda: mp.apply_for_config(config))


def _pair(model_type: str):
    """(stock model, patched model with its weights, inputs with labels, fallback warnings of the patched build)."""
    require_family(model_type)
    config = mini_config(model_type, TINY, **biting_softcap(model_type))
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    stock = auto_class(model_type).from_config(copy.deepcopy(config), dtype=torch.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mp.apply_for_config(config)
        patched = auto_class(model_type).from_config(copy.deepcopy(config), dtype=torch.float32)
        apply_liger_kernel_to_instance(patched)
    patched.load_state_dict(stock.state_dict())
    _wake_both(stock, patched)
    inputs = model_inputs(model_type, config, TINY, BATCH, SEQ, seed=3)
    labels = inputs["input_ids"].clone()
    labels[:, :6] = -100  # the image and the first tokens: the prompt
    fallbacks = [str(w.message) for w in caught if issubclass(w.category, LigerStockFallbackWarning)]
    return stock, patched, inputs, labels, fallbacks


def _wake_both(stock, patched) -> None:
    """hf_models.build's re-initialisation of zero-initialised gates and projections, the same in both models."""
    from hf_models import _wake

    _wake(stock)
    patched.load_state_dict(stock.state_dict())


def _vision_modules(model) -> list[torch.nn.Module]:
    """The Liger modules of the vision tower (module paths naming vision/visual)."""
    return [
        m
        for name, m in model.named_modules()
        if layers.is_liger_class(type(m)) and any(k in name for k in ("vision", "visual"))
    ]


@pytest.mark.parametrize("model_type", MULTIMODAL_FAMILIES)
def test_matches_stock_with_images(model_type):
    stock, patched, inputs, labels, fallbacks = _pair(model_type)
    assert fallbacks == [], fallbacks
    liger = [m for m in patched.modules() if layers.is_liger_class(type(m))]
    assert liger, "no Liger module in the patched model"
    fam = mp.FAMILIES[model_type]
    # The vision tower's norms/MLPs where a catalogue op fits (its own classes, or torch.nn.LayerNorm).
    vision_patched = fam.vision_layer_norm and fam.defaults.get("layer_norm") or model_type in VISION_CLASSES
    if vision_patched:
        assert _vision_modules(patched), "nothing of the vision tower patched"
    config = stock.config
    with _as_stock(config):
        with torch.no_grad():
            ref_logits = stock.eval()(**inputs).logits
        ref = stock.train()(**inputs, labels=labels)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            out_logits = patched.eval()(**inputs).logits
        out = patched.train()(**inputs, labels=labels)
    assert [str(w.message) for w in caught if w.category is LigerStockFallbackWarning] == []
    torch.testing.assert_close(out_logits, ref_logits, **OUT_TOL)
    assert ref.logits is not None, "the reference ran patched"
    assert out.logits is None, "training with labels: the fused loss, no logits"
    torch.testing.assert_close(out.loss, ref.loss, **OUT_TOL)
    ref.loss.backward()
    out.loss.backward()
    g_ref = {n: p.grad for n, p in stock.named_parameters() if p.grad is not None}
    g_out = {n: p.grad for n, p in patched.named_parameters() if p.grad is not None}
    assert g_ref.keys() == g_out.keys()
    vision = [n for n in g_ref if any(k in n for k in ("vision", "visual")) and g_ref[n].abs().sum() > 0]
    assert vision, "the image did not reach the loss"
    for name in g_ref:
        torch.testing.assert_close(g_out[name], g_ref[name], **GRAD_TOL, msg=name)


# Families whose vision tower has its own classes the patch swaps (RMSNorm, gated MLP), beyond LayerNorm.
VISION_CLASSES = ("pixtral", "qwen2_5_vl", "glm4v", "glm4v_moe", "gemma4", "internvl")


@pytest.mark.parametrize("model_type", ["qwen2_vl", "llava", "gemma3", "mllama"])
def test_generate_with_an_image(model_type):
    """Image inputs keep working in generation (eval: the stock forward path, Liger's layers)."""
    stock, patched, inputs, _, _ = _pair(model_type)
    kw = dict(max_new_tokens=3, do_sample=False, pad_token_id=0)
    with _as_stock(stock.config):
        ref = stock.eval().generate(**inputs, **kw)
    out = patched.eval().generate(**inputs, **kw)
    assert out.shape == (BATCH, SEQ + 3)
    assert torch.equal(out, ref)


def test_auto_class_for_image_text_to_text(tmp_path):
    """AutoLigerKernelForImageTextToText: the family, its language model's and its vision tower's patches."""
    from transformers.models.llama import modeling_llama
    from transformers.models.pixtral import modeling_pixtral

    from liger_core.transformers import AutoLigerKernelForImageTextToText

    config = mini_config("pixtral", TINY)  # a LLaVA model: Mistral text, Pixtral vision
    model = AutoLigerKernelForImageTextToText.from_config(config, rope=False, dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16
    names = {type(m).__name__ for m in model.modules()}
    assert {"LigerMistralRMSNorm", "LigerMistralMLP", "LigerPixtralRMSNorm", "LigerPixtralMLP"} <= names
    assert getattr(type(model).forward, "_liger_forward", False)
    assert not hasattr(modeling_pixtral.apply_rotary_pos_emb, "_liger_stock")  # rope=False reached the vision patch
    assert not layers.is_liger_class(modeling_llama.LlamaRMSNorm)  # other families untouched
    model.save_pretrained(tmp_path)
    again = AutoLigerKernelForImageTextToText.from_pretrained(tmp_path)
    assert {type(m).__name__ for m in again.modules()} == names

    with pytest.raises(ValueError, match=r"no Liger patch for model_type 'blip'; supported model types: .*qwen2_vl"):
        from transformers import AutoConfig

        AutoLigerKernelForImageTextToText.from_config(AutoConfig.for_model("blip"))
