"""The patched causal-LM forward: the stock loss without logits under training; logits otherwise."""

from __future__ import annotations

import pytest
import torch
from hf_models import SIZES, biting_softcap, build, initial_state, stock_transformers

from liger_core.transformers import MODEL_TYPE_TO_APPLY_LIGER_FN
from liger_core.transformers import monkey_patch as mp

TINY = SIZES["tiny"]
# Families whose logits differ from lm_head(h): soft-capped (gemma2), scaled (granite), multiplied (falcon_h1),
# MoE aux loss (mixtral, qwen3_moe, gpt_oss).
FORWARD_FAMILIES = ["llama", "gemma2", "granite", "falcon_h1", "mixtral", "qwen3_moe", "gpt_oss"]


def _forward_only(model_type: str) -> None:
    fam = mp.FAMILIES[model_type]
    MODEL_TYPE_TO_APPLY_LIGER_FN[model_type](**{f: f == "fused_linear_cross_entropy" for f in fam.flags})


class _Stock:
    """A model called as stock transformers: the patch (class-level, so it reaches this model too) is reverted
    around each call and applied again after."""

    def __init__(self, model, model_type: str):
        self.model, self.model_type = model, model_type

    def __call__(self, **kwargs):
        with stock_transformers(lambda: _forward_only(self.model_type)):
            return self.model(**kwargs)

    def __getattr__(self, name):
        return getattr(self.model, name)


def _pair(model_type: str, device: str):
    """(stock model, model with only the forward patched), same weights, fp32."""
    cap = biting_softcap(model_type)
    stock = build(model_type, TINY, torch.float32, device, **cap)
    _forward_only(model_type)
    patched = build(model_type, TINY, torch.float32, device, initial_state(stock), **cap)
    return _Stock(stock, model_type), patched


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
    assert ref.logits is not None, "the reference ran patched"
    assert out.logits is None, "training with labels must not materialise logits"
    torch.testing.assert_close(out.loss, ref.loss, atol=2e-6, rtol=2e-6)
    if mp.FAMILIES[model_type].logits.moe_module is not None:
        torch.testing.assert_close(out.aux_loss, ref.aux_loss)
    ref.loss.backward()
    out.loss.backward()
    g_ref, g_out = _grads(stock.model), _grads(patched)
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
    stock.train()
    torch.testing.assert_close(out[0], stock(input_ids=ids, labels=labels).loss, atol=2e-6, rtol=2e-6)


def test_all_labels_ignored_gives_zero_loss(device):
    """Stock gives NaN (0/0); the fused loss gives 0 and zero gradients, so a step does nothing."""
    _, patched = _pair("llama", device)
    ids, _ = _data(device)
    patched.train()
    loss = patched(input_ids=ids, labels=torch.full_like(ids, -100)).loss
    assert loss.item() == 0.0
    loss.backward()
    assert all(torch.count_nonzero(p.grad) == 0 for p in patched.parameters() if p.grad is not None)


# Gradient checkpointing: test_families.test_gradient_checkpointing, every family and config.


def test_signature_is_the_stock_one_plus_skip_logits(device):
    """generate() and the trainers read the forward's signature (logits_to_keep, columns to keep)."""
    import inspect

    stock, patched = _pair("llama", device)
    with stock_transformers(lambda: _forward_only("llama")):
        expected = inspect.signature(stock.model.forward)
    params = inspect.signature(patched.forward).parameters
    assert [n for n in params if n != "skip_logits"] == list(expected.parameters)
    assert params["skip_logits"].kind is inspect.Parameter.KEYWORD_ONLY and params["skip_logits"].default is None


def test_positional_arguments_and_stock_keywords(device):
    """Positional calls bind as the stock forward's; keywords the fused path passes on reach the base model."""
    stock, patched = _pair("llama", device)
    ids, labels = _data(device)
    stock.train(), patched.train()
    ref = stock(input_ids=ids, labels=labels, output_hidden_states=True, output_attentions=True)
    # (input_ids, attention_mask, position_ids, past_key_values, inputs_embeds, labels)
    out = patched(ids, None, None, None, None, labels, output_hidden_states=True, output_attentions=True)
    assert out.logits is None
    torch.testing.assert_close(out.loss, ref.loss, atol=2e-6, rtol=2e-6)
    assert len(out.hidden_states) == len(ref.hidden_states) and len(out.attentions) == len(ref.attentions)
    for a, b in zip(out.hidden_states + out.attentions, ref.hidden_states + ref.attentions):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
    with pytest.raises(TypeError):  # the stock forward's own error for a duplicated argument
        patched(ids, input_ids=ids)


def test_return_dict_false_when_delegating(device):
    stock, patched = _pair("llama", device)
    ids, _ = _data(device)
    stock.eval(), patched.eval()
    with torch.no_grad():
        out = patched(input_ids=ids, return_dict=False)
        ref = stock(input_ids=ids, return_dict=False)
    assert isinstance(out, tuple) and isinstance(ref, tuple) and len(out) == len(ref)
    torch.testing.assert_close(out[0], ref[0], atol=0, rtol=0)


class _ScaledHead(torch.nn.Module):
    """An LM head that is not a plain nn.Linear (as a LoRA or quantized layer is): weight @ h is not its output."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.linear = linear

    def forward(self, h):
        return 2 * self.linear(h)


@pytest.mark.parametrize("what", ["wrapped_head", "custom_loss"])
def test_what_fusion_cannot_reproduce_runs_stock(what, device):
    """A wrapped lm_head or a custom loss_function: training with labels runs the stock forward (logits and all);
    skip_logits=True is refused with the reason."""
    stock, patched = _pair("llama", device)
    ids, labels = _data(device)
    for model in (stock.model, patched):
        if what == "wrapped_head":
            model.lm_head = _ScaledHead(model.lm_head)
        else:
            model.loss_function = lambda logits, labels, vocab_size, **kw: logits.float().square().mean()
    stock.train(), patched.train()
    ref = stock(input_ids=ids, labels=labels)
    out = patched(input_ids=ids, labels=labels)
    assert out.logits is not None
    torch.testing.assert_close(out.loss, ref.loss, atol=1e-6, rtol=1e-6)
    reason = "lm_head is a _ScaledHead" if what == "wrapped_head" else "loss_function is not transformers'"
    with pytest.raises(ValueError, match=f"skip_logits=True: .*{reason}"):
        patched(input_ids=ids, labels=labels, skip_logits=True)


def test_skip_logits_false_is_the_stock_forward(device):
    stock, patched = _pair("gemma2", device)
    ids, labels = _data(device)
    stock.train(), patched.train()
    out = patched(input_ids=ids, labels=labels, skip_logits=False)
    ref = stock(input_ids=ids, labels=labels)
    torch.testing.assert_close(out.logits, ref.logits, atol=0, rtol=0)
    torch.testing.assert_close(out.loss, ref.loss, atol=0, rtol=0)
