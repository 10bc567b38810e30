"""A patched family serves every config stock transformers serves, in every model class it builds.

A class-level patch holds for the whole process, where reward, reference and classification
models of the same family get built too. For each patched family, under two non-default configs
(`hf_models.VARIANTS`: the kernel's activation or another one; tied/untied embeddings flipped;
the family's sliding window and partial RoPE), the base model, the causal LM and the
classification/QA heads the family has are built after the class-level patch and compared with
the stock model of the same weights, built in the same test: outputs in eval, loss and every
gradient in training, greedy `generate`, a save/load round trip into the patched classes,
gradient checkpointing, and every form of ``logits_to_keep`` the installed transformers takes.

Tolerances, float32 (the kernels and stock differ only in summation order and where they round):
outputs and losses atol 2e-5 / rtol 1e-5; gradients atol 5e-5 / rtol 1e-3. Where no Liger
kernel runs (float64 models), the patched model must equal stock exactly.
"""

from __future__ import annotations

import copy
import importlib
import warnings

import pytest
import torch
import transformers
from hf_models import (
    FAMILIES,
    KNOWN_FALLBACKS,
    MOE_FAMILIES,
    SIZES,
    TEXT_FAMILIES,
    VARIANTS,
    require_family,
    stock_transformers,
    variant_config,
)
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)
from transformers.models.auto import modeling_auto

from liger_core.transformers import MODEL_TYPE_TO_APPLY_LIGER_FN, LigerStockFallbackWarning, layers
from liger_core.transformers import monkey_patch as mp

TINY = SIZES["tiny"]
BATCH, SEQ = 2, 10
OUT_TOL = {"atol": 2e-5, "rtol": 1e-5}
# Gradients: atol is relative to the gradient's largest element (at least 1). Summation order moves an
# element by rounding of the terms summed into it, so one near zero in a tensor of large gradients moves by
# that tensor's scale times float32's epsilon: Gemma 4's base model (embeddings scaled by sqrt(hidden), the
# loss a sum over every hidden state) has embedding gradients up to 3e3, where the kernels' float32 order
# moved elements by up to 6e-4 (2e-7 of the scale) in the Triton interpreter.
GRAD_TOL = {"atol": 5e-5, "rtol": 1e-3}

# head -> (auto class, transformers' mapping of model_type to that head's class name)
HEADS = {
    "base": (AutoModel, modeling_auto.MODEL_MAPPING_NAMES),
    "causal_lm": (AutoModelForCausalLM, modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES),
    "seq_cls": (AutoModelForSequenceClassification, modeling_auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES),
    "tok_cls": (AutoModelForTokenClassification, modeling_auto.MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES),
    "qa": (AutoModelForQuestionAnswering, modeling_auto.MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES),
}


@pytest.fixture(autouse=True)
def _every_fallback_warns(monkeypatch):
    """Fallback warnings are once per process; each test here starts afresh so it sees its own."""
    monkeypatch.setattr(layers, "_WARNED", set())


def _require_head(model_type: str, head: str) -> None:
    require_family(model_type)
    model_type = _CONFIG_TYPE.get(model_type, model_type)
    if modeling_auto.MODEL_MAPPING_NAMES.get(model_type) is None:
        pytest.fail(f"transformers {transformers.__version__} has no model for {model_type}")
    if HEADS[head][1].get(model_type) is None:
        pytest.skip(f"transformers {transformers.__version__} has no {head} class for {model_type}")


# The model type whose heads a family builds from its text config (Llama 4's text-only checkpoints).
_CONFIG_TYPE = {"llama4": "llama4_text"}


def _pair(model_type: str, variant: str, head: str = "causal_lm"):
    """(stock model, patched model with the stock one's weights, fallback warnings the patched build gave)."""
    _require_head(model_type, head)
    auto = HEADS[head][0]
    config = variant_config(model_type, variant, TINY)
    torch.manual_seed(0)
    stock = auto.from_config(copy.deepcopy(config), dtype=torch.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        MODEL_TYPE_TO_APPLY_LIGER_FN[model_type]()
        patched = auto.from_config(copy.deepcopy(config), dtype=torch.float32)
    patched.load_state_dict(stock.state_dict())
    fallbacks = [str(w.message) for w in caught if issubclass(w.category, LigerStockFallbackWarning)]
    return stock, patched, fallbacks


def _as_stock(model_type: str):
    """A block where the stock models run as stock transformers (the family's patch reverted, re-applied after)."""
    return stock_transformers(MODEL_TYPE_TO_APPLY_LIGER_FN[model_type])


def _check_patched(patched, variant: str, fallbacks: list[str], model_type: str = "") -> None:
    """The patch reached the model; only the MLPs of a config with another activation run the stock forward."""
    fam = mp.FAMILIES[model_type] if model_type else None
    liger = [m for m in patched.modules() if layers.is_liger_class(type(m))]
    assert liger, "no Liger module in a model built after the patch"
    mlps = [m for m in liger if type(m)._liger_kind in ("swiglu", "geglu", "relu_squared")]
    norms = [m for m in liger if type(m)._liger_kind in ("rms_norm", "layer_norm")]
    assert norms and (mlps or fam is None or not (fam.mlps or fam.experts) or not fam.defaults.get(fam.mlp_flag))
    assert all(m._liger_fallback is None for m in norms)
    # Clamped-SwiGLU experts: GPT-OSS's activation is fixed by the model (every variant fits); DeepSeek-V4's
    # takes hidden_act, as the MLPs do.
    clamped = [m for m in liger if type(m)._liger_kind == "clamped_swiglu"]
    mlps += [m for m in clamped if type(m)._liger_clamped.activation_from_act_fn]
    assert all(m._liger_fallback is None for m in clamped if not type(m)._liger_clamped.activation_from_act_fn)
    if variant == "kernel":
        assert all(m._liger_fallback is None for m in mlps)
        assert fallbacks == []
    else:
        assert all("activation" in m._liger_fallback for m in mlps)
        assert all("activation" in msg for msg in fallbacks), fallbacks
        assert fallbacks or not mlps


def _inputs(vocab: int = TINY.vocab, pad: bool = True) -> dict:
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, vocab, (BATCH, SEQ), generator=g)
    mask = torch.ones_like(ids)
    if pad:  # row 1 right-padded: attention masks, and the sequence head pools its last real token
        ids[1, -3:] = 0
        mask[1, -3:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _targets(head: str, inputs: dict, config) -> dict:
    g = torch.Generator().manual_seed(4)
    if head == "causal_lm":
        labels = inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, -100)
        labels[0, :2] = -100
        return {"labels": labels}
    if head == "seq_cls":
        return {"labels": torch.randint(0, config.num_labels, (BATCH,), generator=g)}
    if head == "tok_cls":
        return {"labels": torch.randint(0, config.num_labels, (BATCH, SEQ), generator=g)}
    if head == "qa":
        return {
            "start_positions": torch.randint(0, SEQ, (BATCH,), generator=g),
            "end_positions": torch.randint(0, SEQ, (BATCH,), generator=g),
        }
    return {}


def _outputs(head: str, out) -> dict[str, torch.Tensor]:
    if head == "base":
        return {"last_hidden_state": out.last_hidden_state}
    if head == "qa":
        return {"start_logits": out.start_logits, "end_logits": out.end_logits}
    return {"logits": out.logits}


def _loss(head: str, out) -> torch.Tensor:
    if head == "base":  # no head: a fixed random projection of every hidden state
        weights = torch.randn(out.last_hidden_state.shape, generator=torch.Generator().manual_seed(5))
        return (out.last_hidden_state * weights).sum()
    return out.loss


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _assert_grads_close(patched, stock) -> None:
    g_ref, g_out = _grads(stock), _grads(patched)
    assert g_ref and g_ref.keys() == g_out.keys()
    for name, ref in g_ref.items():
        atol = GRAD_TOL["atol"] * max(1.0, ref.abs().max().item())
        torch.testing.assert_close(g_out[name], ref, atol=atol, rtol=GRAD_TOL["rtol"], msg=name)


@pytest.mark.parametrize("head", list(HEADS))
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("model_type", TEXT_FAMILIES)
def test_every_head_builds_and_matches_stock(model_type, variant, head):
    """Built after the class-level patch, under non-default configs: eval outputs, training loss and gradients."""
    stock, patched, fallbacks = _pair(model_type, variant, head)
    _check_patched(patched, variant, fallbacks, model_type)
    inputs = _inputs()
    targets = _targets(head, inputs, stock.config)
    with _as_stock(model_type):
        with torch.no_grad():
            ref = _outputs(head, stock.eval()(**inputs))
        ref_out = stock.train()(**inputs, **targets)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            out = _outputs(head, patched.eval()(**inputs))
        for name in ref:
            torch.testing.assert_close(out[name], ref[name], **OUT_TOL, msg=name)
        out = patched.train()(**inputs, **targets)
    # Nothing fell back at run time: the norms, RoPE (and the MLPs of "kernel") ran Liger's kernels.
    known = KNOWN_FALLBACKS.get(model_type, "\0")
    fell_back = [str(w.message) for w in caught if w.category is LigerStockFallbackWarning]
    assert [m for m in fell_back if known not in m] == []
    if head == "causal_lm":
        assert ref_out.logits is not None, "the reference ran patched"
        assert out.logits is None, "training with labels: the fused loss, no logits"
    torch.testing.assert_close(_loss(head, out), _loss(head, ref_out), **OUT_TOL)
    _loss(head, ref_out).backward()
    _loss(head, out).backward()
    _assert_grads_close(patched, stock)


def _run(fn, *args, **kwargs):
    """(result, None), or (None, the exception) where ``fn`` fails."""
    try:
        return fn(*args, **kwargs), None
    except Exception as e:  # compared with what stock raises
        return None, e


def _fails_as_stock(error: Exception | None, stock_error: Exception) -> None:
    """Stock transformers fails here itself: the patched model must fail the same way; nothing else to compare."""
    assert type(error) is type(stock_error), (error, stock_error)
    pytest.skip(f"stock transformers {transformers.__version__} fails here too: {stock_error!r:.200}")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("model_type", TEXT_FAMILIES)
def test_generate_matches_stock(model_type, variant):
    stock, patched, _ = _pair(model_type, variant)
    inputs = _inputs(pad=False)
    kw = dict(max_new_tokens=3, do_sample=False, return_dict_in_generate=True, output_logits=True, pad_token_id=0)
    with _as_stock(model_type):
        ref, stock_error = _run(stock.eval().generate, **inputs, **kw)
    out, error = _run(patched.eval().generate, **inputs, **kw)
    if stock_error is not None:  # transformers 5.0: MoE router loss with an attention mask while generating
        _fails_as_stock(error, stock_error)
    assert error is None, error
    assert out.sequences.shape == (BATCH, SEQ + 3)
    assert torch.equal(out.sequences, ref.sequences)
    for step, (a, b) in enumerate(zip(out.logits, ref.logits)):
        torch.testing.assert_close(a, b, **OUT_TOL, msg=f"step {step}")


def _enable_checkpointing(model) -> None:
    # Newer transformers name it activation_checkpointing_enable (the old name warns).
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("model_type", TEXT_FAMILIES)
def test_gradient_checkpointing(model_type, variant):
    stock, patched, _ = _pair(model_type, variant)
    inputs = _inputs()
    targets = _targets("causal_lm", inputs, stock.config)
    for model in (stock, patched):
        _enable_checkpointing(model)
        assert any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
    with _as_stock(model_type):
        ref = stock.train()(**inputs, **targets)
        ref.loss.backward()  # recomputes the checkpointed forward: stock transformers again
    out = patched.train()(**inputs, **targets)
    assert ref.logits is not None and out.logits is None
    torch.testing.assert_close(out.loss, ref.loss, **OUT_TOL)
    out.loss.backward()
    _assert_grads_close(patched, stock)


@pytest.mark.parametrize("model_type", TEXT_FAMILIES)
def test_save_and_load_round_trip(model_type, tmp_path):
    """A patched model saves the stock checkpoint; loading it while patched gives Liger layers and the same model."""
    stock, patched, _ = _pair(model_type, "other_act")
    patched.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32, attn_implementation="eager")
    assert [type(m).__name__ for m in loaded.modules()] == [type(m).__name__ for m in patched.modules()]
    assert loaded.state_dict().keys() == stock.state_dict().keys()
    for name, value in stock.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], value, atol=0, rtol=0, msg=name)
    inputs = _inputs()
    with torch.no_grad():
        with _as_stock(model_type):
            ref = stock.eval()(**inputs).logits
        torch.testing.assert_close(loaded.eval()(**inputs).logits, ref, **OUT_TOL)


@pytest.mark.parametrize("model_type", TEXT_FAMILIES)
def test_live_model_with_another_activation(model_type):
    """``model=`` converts a model built before the patch, whatever its activation; its outputs do not change."""
    config = variant_config(model_type, "other_act", TINY)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    inputs = _inputs()
    with torch.no_grad():
        before = model(**inputs).logits
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        MODEL_TYPE_TO_APPLY_LIGER_FN[model_type](model=model)
    fam = mp.FAMILIES[model_type]
    if (fam.mlps or fam.experts) and fam.defaults.get(fam.mlp_flag):
        assert any("activation" in str(w.message) for w in caught if w.category is LigerStockFallbackWarning)
    _check_patched(model, "other_act", ["activation"], model_type)
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs).logits, before, **OUT_TOL)


@pytest.mark.parametrize("model_type", TEXT_FAMILIES)
def test_float64_model_runs_stock_exactly(model_type):
    """No kernel takes float64: every Liger layer runs the stock computation (one warning), training included."""
    config = variant_config(model_type, "kernel", TINY)
    # transformers' default MoE path (grouped_mm) takes no float64 either; its eager loop does.
    kw = {"experts_implementation": "eager"} if model_type in MOE_FAMILIES else {}
    torch.manual_seed(0)
    stock = AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=torch.float64, **kw)
    MODEL_TYPE_TO_APPLY_LIGER_FN[model_type]()
    patched = AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=torch.float64, **kw)
    patched.load_state_dict(stock.state_dict())
    inputs = _inputs()
    targets = _targets("causal_lm", inputs, config)
    with pytest.warns(LigerStockFallbackWarning, match="float64 tensors"):
        out = patched.train()(**inputs, **targets)
    with _as_stock(model_type):
        ref = stock.train()(**inputs, **targets)
    assert out.logits is not None, "no fused loss for a float64 LM head"
    torch.testing.assert_close(out.logits, ref.logits, atol=0, rtol=0)
    torch.testing.assert_close(out.loss, ref.loss, atol=0, rtol=0)


@pytest.mark.parametrize("model_type", TEXT_FAMILIES)
def test_meta_device_model_runs_as_stock(model_type):
    """Models built on the meta device (size estimates, deferred init) run forward where stock does (where stock
    fails, as MoE routing does for want of a meta torch.nonzero, the patched model fails the same way)."""
    config = variant_config(model_type, "kernel", TINY)
    inputs = {k: v.to("meta") for k, v in _inputs(pad=False).items()}
    with torch.device("meta"):
        stock = AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=torch.float32).eval()
        MODEL_TYPE_TO_APPLY_LIGER_FN[model_type]()
        patched = AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=torch.float32).eval()
    with _as_stock(model_type):
        ref, stock_error = _run(stock, **inputs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, error = _run(patched, **inputs)
    if stock_error is not None:  # transformers 5.0: its RoPE's autocast guard knows no meta device
        _fails_as_stock(error, stock_error)
    assert error is None, error
    assert any("meta tensors" in str(w.message) for w in caught if w.category is LigerStockFallbackWarning)
    assert out.logits.device.type == "meta" and out.logits.shape == ref.logits.shape == (BATCH, SEQ, config.vocab_size)


# -- logits_to_keep ----------------------------------------------------------------------------

LOGITS_TO_KEEP = ("int_0", "int_k", "positions_1d", "positions_2d", "mask_2d")


def _supports(form: str) -> bool:
    """Whether the installed transformers' forwards take this form (2-D ones came with slice_logits_to_keep)."""
    from transformers import modeling_utils

    return not form.endswith("_2d") or hasattr(modeling_utils, "slice_logits_to_keep")


def _logits_to_keep(form: str):
    """(logits_to_keep, the kept positions' labels from full (batch, seq) labels)."""
    if form == "int_0":
        return 0, lambda labels: labels
    if form == "int_k":
        return 3, lambda labels: labels[:, -3:]
    if form == "positions_1d":
        idx = torch.tensor([1, 4, 9])
        return idx, lambda labels: labels[:, idx]
    if form == "positions_2d":
        idx = torch.tensor([[0, 4, 9], [2, 3, 8]])
        return idx, lambda labels: torch.take_along_dim(labels, idx, dim=1)
    mask = torch.zeros(BATCH, SEQ, dtype=torch.bool)
    mask[0, [1, 2, 6, 9]] = True
    mask[1, [0, 5]] = True  # a different count per row: the output is (kept, vocab)
    return mask, lambda labels: labels[mask]


@pytest.mark.parametrize("form", LOGITS_TO_KEEP)
@pytest.mark.parametrize("model_type", TEXT_FAMILIES)
def test_logits_to_keep(model_type, form):
    """Every form: the stock logits in eval; in training, the stock loss, computed by the stock forward (logits
    kept), or by the fused loss over the kept positions when asked with skip_logits=True."""
    if not _supports(form):
        pytest.skip(f"transformers {transformers.__version__} takes logits_to_keep as an int or 1-D positions only")
    stock, patched, _ = _pair(model_type, "kernel")
    keep, kept_labels = _logits_to_keep(form)
    inputs = _inputs(pad=False)
    labels = kept_labels(_targets("causal_lm", inputs, stock.config)["labels"])
    with _as_stock(model_type):
        with torch.no_grad():
            ref_eval = stock.eval()(**inputs, logits_to_keep=keep).logits
        ref = stock.train()(**inputs, labels=labels, logits_to_keep=keep)
    with torch.no_grad():
        out = patched.eval()(**inputs, logits_to_keep=keep).logits
    assert out.shape == ref_eval.shape
    torch.testing.assert_close(out, ref_eval, **OUT_TOL)

    patched.train()
    auto = patched(**inputs, labels=labels, logits_to_keep=keep)
    # Fused by default only when every position is kept; otherwise the stock forward, logits and all.
    assert (auto.logits is None) == (form == "int_0")
    if auto.logits is not None:
        torch.testing.assert_close(auto.logits, ref.logits, **OUT_TOL)
    torch.testing.assert_close(auto.loss, ref.loss, **OUT_TOL)
    fused = patched(**inputs, labels=labels, logits_to_keep=keep, skip_logits=True)
    assert fused.logits is None
    torch.testing.assert_close(fused.loss, ref.loss, **OUT_TOL)
    ref.loss.backward()
    fused.loss.backward()
    _assert_grads_close(patched, stock)


# -- fused_add_rms_norm in the decoder layer ---------------------------------------------------------


def _count_fused_add(monkeypatch) -> list[tuple]:
    """Each call of liger_fused_add_rms_norm from here on: (x shape, offset, casting_mode)."""
    from liger_core import functional

    calls = []
    op = functional.liger_fused_add_rms_norm

    def counting(x, residual, weight=None, eps=1e-6, offset=0.0, casting_mode="llama", in_place=False):
        calls.append((tuple(x.shape), offset, casting_mode))
        return op(x, residual, weight, eps, offset, casting_mode, in_place)

    monkeypatch.setattr(functional, "liger_fused_add_rms_norm", counting)
    return calls


@pytest.mark.parametrize("model_type", ["llama", "qwen3", "gemma3_text"])
def test_fused_add_rms_norm_runs_in_every_layer(model_type, monkeypatch):
    """The patched decoder layer computes the add before the MLP's norm with fused_add_rms_norm, with the
    family's norm arithmetic: one call per layer per forward, plus one per layer when gradient checkpointing
    recomputes the forward; none with ``fused_add_rms_norm=False``. (That patched equals stock, outputs and
    gradients, is what the tests above check for every family with the flag on by default.)"""
    calls = _count_fused_add(monkeypatch)
    stock, patched, fallbacks = _pair(model_type, "kernel")
    assert fallbacks == []
    n_layers = patched.config.num_hidden_layers
    fam = mp.FAMILIES[model_type]
    inputs = _inputs()
    targets = _targets("causal_lm", inputs, stock.config)
    out = patched.train()(**inputs, **targets)
    norm = (fam.norm.offset, fam.norm.casting_mode)
    assert calls == [((BATCH, SEQ, patched.config.hidden_size), *norm)] * n_layers
    out.loss.backward()
    assert len(calls) == n_layers  # the backward recomputes nothing without checkpointing

    calls.clear()
    _enable_checkpointing(patched)
    patched.zero_grad()
    out = patched.train()(**inputs, **targets)
    out.loss.backward()
    assert len(calls) == 2 * n_layers
    with _as_stock(model_type):
        ref = stock.train()(**inputs, **targets)
    torch.testing.assert_close(out.loss, ref.loss, **OUT_TOL)
    ref.loss.backward()
    _assert_grads_close(patched, stock)

    calls.clear()
    mp.revert_liger_kernel_patches()  # a patch adds to the patches before it: start from stock
    MODEL_TYPE_TO_APPLY_LIGER_FN[model_type](fused_add_rms_norm=False)
    for name in fam.decoder_layers:
        assert not hasattr(getattr(importlib.import_module(fam.modeling), name).forward, "_liger_stock")
    unfused = AutoModelForCausalLM.from_config(copy.deepcopy(patched.config), dtype=torch.float32)
    unfused(**inputs, **targets)
    assert calls == []


@pytest.mark.parametrize("model_type", ["llama", "gemma3_text"])
def test_fused_add_rms_norm_leaves_stock_norms_alone(model_type, monkeypatch):
    """A model built before the patch and not handed to it keeps stock norms, whose arithmetic the op does not
    certify: its (class-level patched) decoder layers run the stock forward, say so once, and match stock."""
    calls = _count_fused_add(monkeypatch)
    config = variant_config(model_type, "kernel", TINY)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    inputs = _inputs()
    with torch.no_grad():
        before = model(**inputs).logits
    MODEL_TYPE_TO_APPLY_LIGER_FN[model_type]()
    with pytest.warns(LigerStockFallbackWarning, match="is the stock"), torch.no_grad():
        after = model(**inputs).logits
    assert calls == []
    torch.testing.assert_close(after, before, atol=0, rtol=0)
    MODEL_TYPE_TO_APPLY_LIGER_FN[model_type](model=model)  # converts its norms: now fused
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs).logits, before, **OUT_TOL)
    assert len(calls) == config.num_hidden_layers


@pytest.mark.parametrize(
    ("x_dtype", "residual_dtype", "fused"),
    [
        (torch.bfloat16, torch.float32, True),  # a float32 residual stream under bf16 autocast
        (torch.float32, torch.bfloat16, True),
        (torch.bfloat16, torch.float16, False),  # the sum is float32: neither input's dtype
    ],
)
def test_fused_add_norm_mixed_dtypes_as_stock(x_dtype, residual_dtype, fused, monkeypatch):
    """``residual + x`` promotes in stock; the fused call returns the wider dtype too, or stock runs."""
    calls = _count_fused_add(monkeypatch)
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    mp.FAMILIES["llama"]  # the table's arithmetic for LLaMA: llama casting, no offset
    norm = layers.rms_norm_class(LlamaRMSNorm, 0.0, "llama", True)(24, eps=1e-6)
    with torch.no_grad():
        norm.weight.normal_(1.0, 0.2, generator=torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 5, 24, generator=g).to(x_dtype)
    residual = torch.randn(3, 5, 24, generator=g).to(residual_dtype)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y, summed = layers._add_norm(norm, x, residual, "test")
    assert len(calls) == int(fused)
    assert fused or any("third dtype" in str(w.message) for w in caught)
    ref_sum = residual + x
    assert summed.dtype == ref_sum.dtype and torch.equal(summed, ref_sum)
    ref = LlamaRMSNorm.forward(norm, ref_sum)
    assert y.dtype == ref.dtype
    torch.testing.assert_close(y, ref, atol=1e-2, rtol=1e-2)


def test_every_family_is_covered():
    """Each family the patch knows is one of the test tables (a new family gets these tests: text families here,
    multimodal ones in test_multimodal.py)."""
    assert set(FAMILIES) == set(mp.FAMILIES)
