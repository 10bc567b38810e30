"""Each family's patch: class-level swaps, a live model's modules, flags, errors."""

from __future__ import annotations

import importlib
import inspect
import os
import warnings

import pytest
import torch
from hf_models import FAMILIES, NAMES_OF_OTHER_RELEASES, SIZES, build, initial_state, model_inputs, require_family

from liger_core.transformers import MODEL_TYPE_TO_APPLY_LIGER_FN, revert_liger_kernel_patches
from liger_core.transformers import monkey_patch as mp
from liger_core.transformers.layers import is_liger_class, rope_function, stock_class

TINY = SIZES["tiny"]


def _stock_names(fam: mp.Family) -> list[str]:
    """The classes a class-level patch swaps, with every flag at its default."""
    on = {flag for flag, value in fam.defaults.items() if value}
    names = []
    if "rms_norm" in on:
        names += [*fam.norms, *(n for n, _ in fam.other_norms)]
    if fam.mlp_flag in on:
        names += [*fam.mlps, *(n for n, _ in fam.other_mlps), *fam.experts, *fam.scaled_input_moes]
        names += [n for n, _ in fam.clamped_experts]
    if "layer_norm" in on:
        names += [n for n, _ in fam.layer_norms]
    return names


def _liger_modules(model) -> dict[str, int]:
    found: dict[str, int] = {}
    for m in model.modules():
        if is_liger_class(type(m)):
            found[type(m).__name__] = found.get(type(m).__name__, 0) + 1
    return found


def _expected_counts(model, fam: mp.Family, live: bool = False) -> dict[str, int]:
    """Liger class name -> how many modules of the model a patch converts (``live``: given ``model=``,
    which also reaches plain torch.nn.LayerNorm modules and, for composites, the sub-families' classes)."""
    names = set(_stock_names(fam))
    if fam.composite:
        config = model.config
        for part in ("text_config", "vision_config"):
            sub = mp.ALIASES.get(getattr(config, part).model_type, getattr(config, part).model_type)
            if sub in mp.FAMILIES:
                names |= set(_stock_names(mp.FAMILIES[sub]))
    # torch.nn.LayerNorm modules: converted on a live model, or built as Liger's where the modeling module
    # imports LayerNorm by name (Qwen2-VL), which the class-level patch then swaps.
    by_name = mp._stock_value(importlib.import_module(fam.modeling), "LayerNorm") is torch.nn.LayerNorm
    plain_ln = (live or by_name) and fam.vision_layer_norm and fam.defaults.get("layer_norm", False)
    counts: dict[str, int] = {}
    for m in model.modules():
        name = stock_class(type(m)).__name__
        if name in names or (plain_ln and stock_class(type(m)) is torch.nn.LayerNorm):
            counts["Liger" + name] = counts.get("Liger" + name, 0) + 1
    return counts


def test_every_family_has_a_patch():
    """One function per family (and per text config of a multimodal one), with liger-kernel's flags then model."""
    assert set(mp.FAMILIES) == set(FAMILIES)
    assert set(MODEL_TYPE_TO_APPLY_LIGER_FN) == set(mp.FAMILIES) | set(mp.ALIASES)
    for model_type, fam in mp.FAMILIES.items():
        fn = MODEL_TYPE_TO_APPLY_LIGER_FN[model_type]
        params = inspect.signature(fn).parameters
        assert [p for p in params if p != "kwargs"] == [*fam.flags, "model"]
        defaults = {k: p.default for k, p in params.items() if k != "kwargs"}
        assert defaults["model"] is None and defaults.get("cross_entropy", False) is False
        assert defaults.get("fused_linear_cross_entropy", True) is True
        # Only what is not available yet (or liger-kernel leaves off) is off by default.
        assert {k for k, v in defaults.items() if v is False and k != "cross_entropy"} == set(fam.off)
        assert {flag for flag, _ in fam.unavailable} <= set(fam.off)
        assert fn.__name__ == f"apply_liger_kernel_to_{model_type}"
    for alias, model_type in mp.ALIASES.items():
        assert MODEL_TYPE_TO_APPLY_LIGER_FN[alias] is MODEL_TYPE_TO_APPLY_LIGER_FN[model_type]


@pytest.mark.parametrize("model_type", FAMILIES)
def test_every_named_class_exists(model_type):
    """The table names classes the installed transformers has (a name it lacks would be skipped silently)."""
    require_family(model_type)
    fam = mp.FAMILIES[model_type]
    mod = importlib.import_module(fam.modeling)
    names = [*fam.heads, *fam.norms, *(n for n, _ in fam.other_norms), *fam.mlps, *(n for n, _ in fam.other_mlps)]
    names += [*fam.experts, *fam.scaled_input_moes, *(n for n, _ in fam.layer_norms), *fam.decoder_layers]
    missing = [n for n in names if not isinstance(getattr(mod, n, None), type)]
    if missing and model_type in NAMES_OF_OTHER_RELEASES:
        missing = [n for n in missing if n not in NAMES_OF_OTHER_RELEASES[model_type]]
    assert missing == []


@pytest.mark.parametrize("model_type", FAMILIES)
def test_class_level_patch(model_type):
    """Module attributes swapped, models built afterwards made of Liger layers; revert restores."""
    require_family(model_type)
    fam = mp.FAMILIES[model_type]
    mod = importlib.import_module(fam.modeling)
    names = [n for n in _stock_names(fam) if hasattr(mod, n)]
    stock = {name: getattr(mod, name) for name in names}
    stock_rope = getattr(mod, "apply_rotary_pos_emb", None)
    heads = [getattr(mod, h) for h in fam.heads if hasattr(mod, h)]
    stock_forwards = [h.forward for h in heads]
    decoder_layers = [getattr(mod, name) for name in fam.decoder_layers]
    stock_layer_forwards = [cls.forward for cls in decoder_layers]

    MODEL_TYPE_TO_APPLY_LIGER_FN[model_type]()
    for name, cls in stock.items():
        patched = getattr(mod, name)
        assert is_liger_class(patched) and issubclass(patched, cls), name
    if fam.rope is not None and stock_rope is not None and fam.defaults.get("rope"):
        # Liger's RoPE in front of the family's own (which runs where Liger's does not fit).
        assert mod.apply_rotary_pos_emb._liger_stock is stock_rope
        assert mod.apply_rotary_pos_emb is rope_function(stock_rope, fam.rope)
    else:
        assert getattr(mod, "apply_rotary_pos_emb", None) is stock_rope
    for head in heads:
        assert getattr(head.forward, "_liger_forward", False), head
    for cls, stock_forward in zip(decoder_layers, stock_layer_forwards):
        assert cls.forward._liger_stock is stock_forward, cls  # fused_add_rms_norm, on by default

    if not fam.composite:  # a composite's layers are its language model's family's (test_multimodal)
        model = build(model_type, TINY, torch.float32, "cpu")
        found = _liger_modules(model)
        assert found and found == _expected_counts(model, fam)

    revert_liger_kernel_patches()
    assert {name: getattr(mod, name) for name in stock} == stock
    assert getattr(mod, "apply_rotary_pos_emb", None) is stock_rope
    assert [h.forward for h in heads] == stock_forwards
    assert [cls.forward for cls in decoder_layers] == stock_layer_forwards


@pytest.mark.parametrize("model_type", FAMILIES)
def test_live_model_patch(model_type):
    """A model built before the patch: every norm/MLP/experts module converted, outputs unchanged in eval."""
    require_family(model_type)
    fam = mp.FAMILIES[model_type]
    model = build(model_type, TINY, torch.float32, "cpu").eval()
    assert not _liger_modules(model)
    expected = _expected_counts(model, fam, live=True)
    inputs = model_inputs(model_type, model.config, TINY, batch=2, seq=10, seed=0)
    with torch.no_grad():
        before = _output(model(**inputs))

    MODEL_TYPE_TO_APPLY_LIGER_FN[model_type](model=model)
    found = _liger_modules(model)
    assert found == expected
    for head in fam.heads:
        if type(model).__name__ == head:
            assert getattr(type(model).forward, "_liger_forward", False)
    # Parameters untouched (names and values): checkpoints still load.
    assert set(initial_state(model)) == {n for n, _ in model.state_dict().items()}
    with torch.no_grad():
        after = _output(model(**inputs))
    torch.testing.assert_close(after, before, atol=2e-5, rtol=1e-5)

    # Applying twice is harmless.
    MODEL_TYPE_TO_APPLY_LIGER_FN[model_type](model=model)
    assert _liger_modules(model) == expected


def _output(out) -> torch.Tensor:
    return out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state


@pytest.mark.parametrize("model_type", ["llama", "gemma2", "nemotron", "qwen2_vl"])
def test_flags_off_patch_nothing(model_type):
    require_family(model_type)
    fam = mp.FAMILIES[model_type]
    mod = importlib.import_module(fam.modeling)
    before = {name: getattr(mod, name) for name in [*_stock_names(fam), "apply_rotary_pos_emb"] if hasattr(mod, name)}
    forward = getattr(mod, fam.heads[0]).forward
    layer_forwards = [getattr(mod, name).forward for name in fam.decoder_layers]
    model = build(model_type, TINY, torch.float32, "cpu")
    MODEL_TYPE_TO_APPLY_LIGER_FN[model_type](model=model, **{flag: False for flag in fam.flags})
    assert {name: getattr(mod, name) for name in before} == before
    assert getattr(mod, fam.heads[0]).forward is forward
    assert [getattr(mod, name).forward for name in fam.decoder_layers] == layer_forwards
    assert not _liger_modules(model)


@pytest.mark.parametrize("model_type", sorted(m for m, f in mp.FAMILIES.items() if f.unavailable))
def test_unavailable_flag_is_a_clear_error(model_type):
    """A flag whose op the catalogue lacks for this family yet: off by default, an error naming it when asked."""
    fam = mp.FAMILIES[model_type]
    for flag, _ in fam.unavailable:
        with pytest.raises(ValueError, match=f"{flag}=True is not available for model type '{model_type}'"):
            MODEL_TYPE_TO_APPLY_LIGER_FN[model_type](**{flag: True})
    assert not mp._SAVED, "nothing patched"


def test_unknown_flag_and_model_type():
    with pytest.raises(TypeError, match="swiglu"):
        MODEL_TYPE_TO_APPLY_LIGER_FN["gemma"](swiglu=True)
    from transformers import AutoConfig, AutoModelForCausalLM

    gpt2 = AutoModelForCausalLM.from_config(AutoConfig.for_model("gpt2", n_layer=1, n_embd=16, n_head=2, vocab_size=32))
    with pytest.raises(ValueError, match=r"no Liger patch for model_type 'gpt2'; supported model types: .*llama"):
        mp.apply_liger_kernel_to_instance(gpt2)


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
    """The flags of the model's family are applied; another family's (geglu for Qwen2) are ignored; unknown ones
    are an error."""
    model = build("qwen2", TINY, torch.float32, "cpu")
    mp.apply_liger_kernel_to_instance(model, rope=False, geglu=False)
    assert _liger_modules(model)
    from transformers.models.qwen2 import modeling_qwen2

    assert not hasattr(modeling_qwen2.apply_rotary_pos_emb, "_liger_stock")
    with pytest.raises(TypeError, match=r"unknown Liger patch argument\(s\) \['not_a_flag'\]"):
        mp.apply_liger_kernel_to_instance(model, not_a_flag=1)
    with pytest.raises(ValueError, match="no Liger patch for model_type None"):
        mp.apply_liger_kernel_to_instance(torch.nn.Module())
    assert mp._apply_liger_kernel_to_instance is mp.apply_liger_kernel_to_instance  # liger-kernel's name


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
    assert backend is not None, (
        f"no backend serves {device}: the tests would compare the PyTorch reference with stock "
        "(from the source trees: PYTHONPATH=packages/liger-core/src:packages/liger-ops-cuda/src)"
    )
    # Every op some family's patch uses (relu_squared, layer_norm, qwen2vl_mrope, ... included).
    used = sorted({op for t in mp.FAMILIES for ops in mp.family_ops(t).values() for op in ops})
    assert {
        "rms_norm", "layer_norm", "swiglu", "geglu", "relu_squared", "rope", "qwen2vl_mrope", "llama4_rope",
        "fused_gate_up_swiglu", "fused_moe",
    } <= set(used)  # fmt: skip
    assert [op for op in used if op not in backend.ops] == [], f"{backend.name} lacks ops the patches use"


def test_liger_families_lists_every_family_and_its_ops(capsys):
    """``liger families``: every family, each flag's ops from the catalogue, what the family lacks yet."""
    import json

    from liger_core.cli import main
    from liger_core.interface import CATALOGUE

    assert main(["families", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert set(info["families"]) == set(mp.FAMILIES)
    for model_type, fam in info["families"].items():
        assert set(fam["flags"]) == set(mp.FAMILIES[model_type].flags)
        assert all(op in CATALOGUE for ops in fam["ops"].values() for op in ops)
        for flag, _ in mp.FAMILIES[model_type].unavailable:
            assert fam["ops"][flag] == [] and fam["not_yet"]
    assert info["families"]["nemotron"]["ops"]["relu_squared"] == ["relu_squared"]
    assert info["families"]["qwen2_vl"]["ops"]["rope"] == ["rope", "qwen2vl_mrope"]
    assert main(["families"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("45 model families") and "deepseek_v3" in text and "RoPE (interleaved)" in text
    assert max(len(line) for line in text.splitlines()) <= 100  # wrapped (table rows reached 366 columns)
