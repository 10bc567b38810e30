"""Each family's patch: class-level swaps, a live model's modules, flags, errors."""

from __future__ import annotations

import importlib
import inspect
import os
import warnings

import pytest
import torch
from hf_models import FAMILIES, SIZES, build, initial_state

from liger_core.transformers import MODEL_TYPE_TO_APPLY_LIGER_FN, revert_liger_kernel_patches
from liger_core.transformers import monkey_patch as mp
from liger_core.transformers.layers import is_liger_class, rope_function, stock_class

TINY = SIZES["tiny"]


def _stock_names(fam: mp.Family) -> list[str]:
    return [*fam.norms, *fam.mlps, *fam.experts]


def _liger_modules(model) -> dict[str, int]:
    found: dict[str, int] = {}
    for m in model.modules():
        if is_liger_class(type(m)):
            found[type(m).__name__] = found.get(type(m).__name__, 0) + 1
    return found


def _expected_counts(model, fam: mp.Family) -> dict[str, int]:
    counts: dict[str, int] = {}
    for m in model.modules():
        name = stock_class(type(m)).__name__
        if name in _stock_names(fam):
            counts["Liger" + name] = counts.get("Liger" + name, 0) + 1
    return counts


def test_every_family_has_a_patch():
    assert set(MODEL_TYPE_TO_APPLY_LIGER_FN) == set(FAMILIES) == set(mp.FAMILIES)
    for model_type, fn in MODEL_TYPE_TO_APPLY_LIGER_FN.items():
        params = inspect.signature(fn).parameters
        mlp_flag = "geglu" if model_type.startswith("gemma") else "swiglu"
        assert list(params) == ["rope", "cross_entropy", "fused_linear_cross_entropy", "rms_norm", mlp_flag, "model"]
        defaults = {k: p.default for k, p in params.items()}
        assert defaults == {
            "rope": True,
            "cross_entropy": False,
            "fused_linear_cross_entropy": True,
            "rms_norm": True,
            mlp_flag: True,
            "model": None,
        }
        assert fn.__name__ == f"apply_liger_kernel_to_{model_type}"


@pytest.mark.parametrize("model_type", FAMILIES)
def test_class_level_patch(model_type):
    """Module attributes swapped, models built afterwards made of Liger layers; revert restores."""
    fam = mp.FAMILIES[model_type]
    mod = importlib.import_module(fam.modeling)
    stock = {name: getattr(mod, name) for name in _stock_names(fam)}
    stock_rope = mod.apply_rotary_pos_emb
    stock_forward = getattr(mod, fam.causal_lm).forward

    MODEL_TYPE_TO_APPLY_LIGER_FN[model_type]()
    for name, cls in stock.items():
        patched = getattr(mod, name)
        assert is_liger_class(patched) and issubclass(patched, cls), name
    # Liger's RoPE in front of the family's own (which runs where Liger's does not fit).
    assert mod.apply_rotary_pos_emb._liger_stock is stock_rope
    assert mod.apply_rotary_pos_emb is rope_function(stock_rope, fam.partial_rope)
    assert getattr(getattr(mod, fam.causal_lm).forward, "_liger_forward", False)

    model = build(model_type, TINY, torch.float32, "cpu")
    found = _liger_modules(model)
    assert found and found == _expected_counts(model, fam)

    revert_liger_kernel_patches()
    assert {name: getattr(mod, name) for name in stock} == stock
    assert mod.apply_rotary_pos_emb is stock_rope
    assert getattr(mod, fam.causal_lm).forward is stock_forward


@pytest.mark.parametrize("model_type", FAMILIES)
def test_live_model_patch(model_type):
    """A model built before the patch: every norm/MLP/experts module converted, outputs unchanged in eval."""
    fam = mp.FAMILIES[model_type]
    model = build(model_type, TINY, torch.float32, "cpu").eval()
    assert not _liger_modules(model)
    expected = _expected_counts(model, fam)
    ids = torch.randint(3, TINY.vocab, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(input_ids=ids).logits

    MODEL_TYPE_TO_APPLY_LIGER_FN[model_type](model=model)
    assert _liger_modules(model) == expected
    assert getattr(type(model).forward, "_liger_forward", False)
    # Parameters untouched (names and values): checkpoints still load.
    assert set(initial_state(model)) == {n for n, _ in model.state_dict().items()}
    with torch.no_grad():
        after = model(input_ids=ids).logits
    torch.testing.assert_close(after, before, atol=2e-5, rtol=1e-5)

    # Applying twice is harmless.
    MODEL_TYPE_TO_APPLY_LIGER_FN[model_type](model=model)
    assert _liger_modules(model) == expected


@pytest.mark.parametrize("model_type", ["llama", "gemma2"])
def test_flags_off_patch_nothing(model_type):
    fam = mp.FAMILIES[model_type]
    mod = importlib.import_module(fam.modeling)
    before = {name: getattr(mod, name) for name in [*_stock_names(fam), "apply_rotary_pos_emb"]}
    forward = getattr(mod, fam.causal_lm).forward
    mlp_flag = "geglu" if model_type.startswith("gemma") else "swiglu"
    model = build(model_type, TINY, torch.float32, "cpu")
    MODEL_TYPE_TO_APPLY_LIGER_FN[model_type](
        rope=False, fused_linear_cross_entropy=False, rms_norm=False, **{mlp_flag: False}, model=model
    )
    assert {name: getattr(mod, name) for name in before} == before
    assert getattr(mod, fam.causal_lm).forward is forward
    assert not _liger_modules(model)


def test_both_cross_entropy_flags_is_an_error():
    with pytest.raises(ValueError, match="cross_entropy=True and fused_linear_cross_entropy=True are exclusive"):
        MODEL_TYPE_TO_APPLY_LIGER_FN["llama"](cross_entropy=True, fused_linear_cross_entropy=True)
    # Nothing was patched.
    from transformers.models.llama import modeling_llama

    assert not is_liger_class(modeling_llama.LlamaRMSNorm)


def test_cross_entropy_flag_routes_the_stock_loss(device):
    """cross_entropy=True: logits materialised, the loss through Liger's cross-entropy, same value."""
    from transformers.loss import loss_utils

    model = build("llama", TINY, torch.float32, device).train()
    ids = torch.randint(3, TINY.vocab, (2, 12), device=device)
    expected = model(input_ids=ids, labels=ids).loss
    stock_ce = loss_utils.fixed_cross_entropy
    MODEL_TYPE_TO_APPLY_LIGER_FN["llama"](cross_entropy=True, fused_linear_cross_entropy=False, model=model)
    assert loss_utils.fixed_cross_entropy is not stock_ce
    out = model(input_ids=ids, labels=ids)
    assert out.logits is not None
    torch.testing.assert_close(out.loss, expected, atol=1e-5, rtol=1e-5)
    revert_liger_kernel_patches()
    assert loss_utils.fixed_cross_entropy is stock_ce


def test_unserved_activation_runs_the_stock_mlp(monkeypatch):
    """An activation the fused MLP does not compute: the module is still converted and runs the stock forward,
    with one warning for that reason, whether built after the patch or converted live."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from liger_core.transformers import LigerStockFallbackWarning, layers

    monkeypatch.setattr(layers, "_WARNED", set())
    config = AutoConfig.for_model(
        "llama", hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=64
    )
    config.hidden_act = "relu"
    ids = torch.randint(0, 64, (1, 7))
    live = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        expected = live(input_ids=ids).logits
    with pytest.warns(LigerStockFallbackWarning, match="LigerLlamaMLP: activation ReLU, while Liger's swiglu computes"):
        MODEL_TYPE_TO_APPLY_LIGER_FN["llama"](model=live)
    assert {type(m).__name__ for m in live.modules()} >= {"LigerLlamaMLP", "LigerLlamaRMSNorm"}
    assert all(m._liger_fallback for m in live.modules() if type(m).__name__ == "LigerLlamaMLP")
    with torch.no_grad():
        torch.testing.assert_close(live(input_ids=ids).logits, expected, atol=2e-5, rtol=1e-5)

    with warnings.catch_warnings(record=True) as caught:  # that reason was given once already
        warnings.simplefilter("always")
        built = AutoModelForCausalLM.from_config(config)
    assert not [w for w in caught if issubclass(w.category, LigerStockFallbackWarning)]
    built.load_state_dict(live.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(built.eval()(input_ids=ids).logits, expected, atol=2e-5, rtol=1e-5)


def test_model_must_be_a_module():
    with pytest.raises(TypeError, match="model must be a transformers PreTrainedModel; got str"):
        MODEL_TYPE_TO_APPLY_LIGER_FN["llama"](model="llama")


def test_old_transformers_is_refused(monkeypatch):
    import transformers

    monkeypatch.setattr(transformers, "__version__", "4.57.1")
    with pytest.raises(ImportError, match=r"needs transformers >= 5\.0\.0; found 4\.57\.1"):
        MODEL_TYPE_TO_APPLY_LIGER_FN["llama"]()


def test_patch_by_instance_helper():
    model = build("qwen2", TINY, torch.float32, "cpu")
    mp._apply_liger_kernel_to_instance(model, rope=False, not_a_flag=1)
    assert _liger_modules(model)
    with pytest.raises(ValueError, match="no Liger patch for model_type None"):
        mp._apply_liger_kernel_to_instance(torch.nn.Module())


def test_patched_model_pickles(tmp_path):
    model = build("qwen3", TINY, torch.float32, "cpu")
    MODEL_TYPE_TO_APPLY_LIGER_FN["qwen3"](model=model)
    torch.save(model, tmp_path / "m.pt")
    again = torch.load(tmp_path / "m.pt", weights_only=False)
    assert _liger_modules(again) == _liger_modules(model)


def test_ops_are_served_by_the_backend_under_test(device):
    """Where a backend is under test (LIGER_BACKEND, or an accelerator's), it serves every op the patches use:
    the convergence tests then check its kernels, not the reference fallback."""
    from liger_core.registry import REGISTRY

    forced = os.environ.get("LIGER_BACKEND", "").strip()
    if device == "cpu" and forced in ("", "reference"):
        pytest.skip("ops on the PyTorch reference here (no LIGER_BACKEND, no accelerator)")
    backend = REGISTRY.backend_for_device(device)
    assert backend is not None, f"no backend serves {device}"
    used = ("rms_norm", "swiglu", "geglu", "rope", "fused_linear_cross_entropy")
    assert [op for op in used if op not in backend.ops] == [], f"{backend.name} lacks ops the patches use"
