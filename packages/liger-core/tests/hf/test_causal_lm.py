"""The patched causal-LM forward: the stock loss without logits under training; logits otherwise."""

from __future__ import annotations

import pytest
import torch
from hf_models import SIZES, build, initial_state

from liger_core.transformers import MODEL_TYPE_TO_APPLY_LIGER_FN

TINY = SIZES["tiny"]
# Families whose logits differ from lm_head(h): soft-capped (gemma2), scaled (granite), MoE aux loss.
FORWARD_FAMILIES = ["llama", "gemma2", "granite", "mixtral", "qwen3_moe"]


def _pair(model_type: str, device: str):
    """(stock model, model with only the forward patched), same weights, fp32."""
    stock = build(model_type, TINY, torch.float32, device)
    MODEL_TYPE_TO_APPLY_LIGER_FN[model_type](
        rope=False, rms_norm=False, model=None, **{("geglu" if model_type.startswith("gemma") else "swiglu"): False}
    )
    patched = build(model_type, TINY, torch.float32, device, initial_state(stock))
    return stock, patched


def _data(device: str, ignore_prefix: int = 3):
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(3, TINY.vocab, (2, 17), generator=g)
    labels = ids.clone()
    labels[0, :ignore_prefix] = -100
    labels[1, -5:] = -100
    return ids.to(device), labels.to(device)


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("model_type", FORWARD_FAMILIES)
@pytest.mark.parametrize("num_items", [None, 41])
def test_training_loss_matches_stock_without_logits(model_type, num_items, device):
    stock, patched = _pair(model_type, device)
    ids, labels = _data(device)
    kw = {} if num_items is None else {"num_items_in_batch": torch.tensor(num_items, device=device)}
    stock.train(), patched.train()
    ref = stock(input_ids=ids, labels=labels, **kw)
    out = patched(input_ids=ids, labels=labels, **kw)
    assert out.logits is None, "training with labels must not materialise logits"
    torch.testing.assert_close(out.loss, ref.loss, atol=2e-6, rtol=2e-6)
    if model_type in ("mixtral", "qwen3_moe"):
        torch.testing.assert_close(out.aux_loss, ref.aux_loss)
    ref.loss.backward()
    out.loss.backward()
    g_ref, g_out = _grads(stock), _grads(patched)
    assert g_ref.keys() == g_out.keys()
    for name in g_ref:
        torch.testing.assert_close(g_out[name], g_ref[name], atol=2e-6, rtol=1e-4, msg=name)


@pytest.mark.parametrize("model_type", ["llama", "gemma2"])
def test_shift_labels_are_used_as_given(model_type, device):
    stock, patched = _pair(model_type, device)
    ids, labels = _data(device)
    shift = torch.nn.functional.pad(labels, (0, 1), value=-100)[..., 1:].contiguous()
    stock.train(), patched.train()
    ref = stock(input_ids=ids, labels=labels).loss
    out = patched(input_ids=ids, shift_labels=shift)
    assert out.logits is None
    torch.testing.assert_close(out.loss, ref, atol=2e-6, rtol=2e-6)


@pytest.mark.parametrize("model_type", FORWARD_FAMILIES)
def test_logits_when_evaluating_or_asked(model_type, device):
    stock, patched = _pair(model_type, device)
    ids, labels = _data(device)
    stock.eval(), patched.eval()
    with torch.no_grad():
        ref = stock(input_ids=ids, labels=labels)
        out = patched(input_ids=ids, labels=labels)
        torch.testing.assert_close(out.logits, ref.logits, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(out.loss, ref.loss, atol=2e-6, rtol=2e-6)
        no_labels = patched(input_ids=ids)
        assert no_labels.loss is None
        torch.testing.assert_close(no_labels.logits, ref.logits, atol=1e-6, rtol=1e-6)
        kept = patched(input_ids=ids, logits_to_keep=1)
        torch.testing.assert_close(kept.logits, ref.logits[:, -1:], atol=1e-6, rtol=1e-6)
    stock.train(), patched.train()
    asked = patched(input_ids=ids, labels=labels, skip_logits=False)
    assert asked.logits is not None
    torch.testing.assert_close(asked.loss, stock(input_ids=ids, labels=labels).loss, atol=2e-6, rtol=2e-6)
    patched.eval()
    forced = patched(input_ids=ids, labels=labels, skip_logits=True)
    assert forced.logits is None
    with pytest.raises(ValueError, match="skip_logits=True needs labels"):
        patched(input_ids=ids, skip_logits=True)


def test_return_dict_false_gives_a_tuple(device):
    stock, patched = _pair("llama", device)
    ids, labels = _data(device)
    patched.train()
    out = patched(input_ids=ids, labels=labels, return_dict=False)
    assert isinstance(out, tuple)
    torch.testing.assert_close(out[0], stock.train()(input_ids=ids, labels=labels).loss, atol=2e-6, rtol=2e-6)


def test_all_labels_ignored_gives_zero_loss(device):
    """Stock gives NaN (0/0); the fused loss gives 0 and zero gradients, so a step does nothing."""
    _, patched = _pair("llama", device)
    ids, _ = _data(device)
    patched.train()
    loss = patched(input_ids=ids, labels=torch.full_like(ids, -100)).loss
    assert loss.item() == 0.0
    loss.backward()
    assert all(torch.count_nonzero(p.grad) == 0 for p in patched.parameters() if p.grad is not None)


def test_gradient_checkpointing(device):
    """The patched layers under transformers' gradient checkpointing (as the e2e benchmark runs)."""
    stock = build("llama", TINY, torch.float32, device)
    MODEL_TYPE_TO_APPLY_LIGER_FN["llama"]()
    patched = build("llama", TINY, torch.float32, device, initial_state(stock))
    ids, labels = _data(device)
    for m in (stock, patched):
        m.gradient_checkpointing_enable()
        m.train()
        m(input_ids=ids, labels=labels).loss.backward()
    g_ref, g_out = _grads(stock), _grads(patched)
    for name in g_ref:
        torch.testing.assert_close(g_out[name], g_ref[name], atol=2e-5, rtol=1e-3, msg=name)
