"""AutoLigerKernelForCausalLM: the patch picked from model_type, keyword arguments split between the sides."""

from __future__ import annotations

import importlib

import pytest
import torch
from hf_models import SIZES, build, mini_config

from liger_core.transformers import AutoLigerKernelForCausalLM
from liger_core.transformers import monkey_patch as mp
from liger_core.transformers.layers import is_liger_class

TINY = SIZES["tiny"]


def _liger(model) -> set[str]:
    return {type(m).__name__ for m in model.modules() if is_liger_class(type(m))}


@pytest.mark.parametrize("model_type", ["qwen2", "gemma3_text", "mixtral"])
def test_from_config(model_type):
    config = mini_config(model_type, TINY)
    flag = "geglu" if model_type.startswith("gemma") else "swiglu"
    model = AutoLigerKernelForCausalLM.from_config(config, **{flag: False}, dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16  # the transformers-side argument arrived
    found = _liger(model)
    assert found and all("RMSNorm" in name for name in found)  # the patch-side argument arrived
    fam = mp.FAMILIES[model_type]
    mod = importlib.import_module(fam.modeling)
    assert getattr(getattr(mod, fam.heads[0]).forward, "_liger_forward", False)


def test_from_pretrained(tmp_path):
    stock = build("llama", TINY, torch.float32, "cpu")
    stock.save_pretrained(tmp_path)
    model = AutoLigerKernelForCausalLM.from_pretrained(tmp_path, rope=False, dtype=torch.float32)
    assert {"LigerLlamaRMSNorm", "LigerLlamaMLP"} <= _liger(model)
    from transformers.models.llama import modeling_llama

    assert not getattr(modeling_llama.apply_rotary_pos_emb, "__module__", "").startswith("liger_core")
    for (name, p), q in zip(stock.state_dict().items(), model.state_dict().values()):
        torch.testing.assert_close(q, p, msg=name)  # the checkpoint loaded into the Liger layers
    ids = torch.randint(3, TINY.vocab, (1, 9))
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(input_ids=ids).logits, stock.eval()(input_ids=ids).logits)


def test_unknown_model_type_is_an_error_listing_the_supported_ones(tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model("gpt2", n_embd=32, n_layer=1, n_head=2, vocab_size=64, n_positions=32)
    supported = r"supported model types: deepseek_v2, deepseek_v3, .*, smolvlm \(and the text configs .*qwen2_vl_text"
    with pytest.raises(ValueError, match=f"no Liger patch for model_type 'gpt2'; {supported}"):
        AutoLigerKernelForCausalLM.from_config(config)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="no Liger patch for model_type 'gpt2'"):
        AutoLigerKernelForCausalLM.from_pretrained(tmp_path)


@pytest.mark.parametrize("model_type", ["nemotron", "qwen3_next", "deepseek_v3"])
def test_from_config_newer_families(model_type):
    """Every family through the Auto class; another family's flag (geglu for a SwiGLU model) is ignored."""
    from hf_models import require_family

    require_family(model_type)
    model = AutoLigerKernelForCausalLM.from_config(mini_config(model_type, TINY), geglu=False)
    fam = mp.FAMILIES[model_type]
    assert _liger(model) >= {
        "Liger" + n
        for n in (*fam.norms, *fam.mlps)
        if n in {type(m).__name__.removeprefix("Liger") for m in model.modules()}
    }
    assert _liger(model)
