"""The names frameworks import from liger_kernel, with liger-kernel 0.8.5's argument names; the version
transformers reads; the error for what the drop-in lacks."""

from __future__ import annotations

import inspect

import liger_kernel
import liger_kernel.chunked_loss as chunked_loss
import liger_kernel.transformers as lkt
import pytest
import torch
from liger_kernel.transformers import monkey_patch

# liger-kernel 0.8.5's flag names, per patch, where they are not the common text-model set.
TEXT = {"rope", "cross_entropy", "fused_linear_cross_entropy", "rms_norm", "swiglu", "model"}


def test_every_upstream_patch_and_the_qwen3_5_text_pair():
    for model_type in (*monkey_patch.UPSTREAM_FAMILIES, *monkey_patch.TEXT_CONFIG_NAMES):
        fn = getattr(lkt, f"apply_liger_kernel_to_{model_type}")
        assert fn is monkey_patch.MODEL_TYPE_TO_APPLY_LIGER_FN[model_type], model_type
        assert "model" in inspect.signature(fn).parameters, model_type
    assert len(monkey_patch.UPSTREAM_FAMILIES) == 45  # liger-kernel 0.8.5's count


@pytest.mark.parametrize(
    ("model_type", "flags"),
    [
        ("llama", TEXT),
        ("qwen2", TEXT),
        ("gemma", {"rope", "cross_entropy", "fused_linear_cross_entropy", "rms_norm", "geglu", "model"}),
        ("gpt_oss", TEXT),
        ("qwen3_5_text", {*TEXT, "layer_norm"}),
    ],
)
def test_upstream_flag_names(model_type, flags):
    params = set(inspect.signature(getattr(lkt, f"apply_liger_kernel_to_{model_type}")).parameters)
    assert flags <= params, flags - params


def test_the_modules_frameworks_import():
    for name in (
        "LigerRMSNorm",
        "LigerSwiGLUMLP",
        "LigerGEGLUMLP",
        "LigerLayerNorm",
        "LigerCrossEntropyLoss",
        "LigerFusedLinearCrossEntropyLoss",
        "AutoLigerKernelForCausalLM",
        "liger_rotary_pos_emb",
        "_apply_liger_kernel_to_instance",
    ):
        assert getattr(lkt, name) is not None, name
    for name in chunked_loss.__all__:
        assert issubclass(getattr(chunked_loss, name), torch.nn.Module), name
    from liger_kernel.transformers.functional import liger_cross_entropy, liger_rms_norm  # noqa: F401
    from liger_kernel.utils import infer_device

    assert infer_device() in ("cuda", "npu", "xpu", "cpu")


def test_liger_rms_norm_module_runs_and_answers_isinstance_for_patched_layers():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    from liger_core.transformers import layers

    norm = lkt.LigerRMSNorm(8)
    assert isinstance(norm, lkt.LigerRMSNorm)
    x = torch.randn(2, 8)
    torch.testing.assert_close(norm(x), x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    patched = layers.rms_norm_class(LlamaRMSNorm, 0.0, "llama", False)(8)
    assert isinstance(patched, lkt.LigerRMSNorm)
    assert not isinstance(LlamaRMSNorm(8), lkt.LigerRMSNorm)
    assert not isinstance(patched, lkt.LigerLayerNorm)


def test_transformers_reads_a_version_it_accepts():
    from transformers.utils import import_utils

    available, version = import_utils._is_package_available("liger_kernel", return_version=True)
    assert available and version == liger_kernel.__version__ == "0.9.0"
    assert import_utils.is_liger_kernel_available()


@pytest.mark.parametrize(
    ("module", "name", "said"),
    [
        (lkt, "LigerMLP", "LigerSwiGLUMLP"),
        (lkt, "apply_liger_kernel_to_bert", "liger families"),
        (liger_kernel, "ops", "liger families"),
        (chunked_loss, "LigerFusedLinearPPOLoss", "liger_kernel.chunked_loss.LigerFusedLinearPPOLoss"),
    ],
)
def test_what_is_missing_names_itself_and_the_equivalent(module, name, said):
    with pytest.raises(AttributeError, match="liger-kernel-dropin") as e:
        getattr(module, name)
    assert said in str(e.value) and f"{module.__name__}.{name}" in str(e.value)
    with pytest.raises(ImportError, match=name):
        exec(f"from {module.__name__} import {name}", {})


def test_instance_entry_point_leaves_unknown_model_types_as_liger_kernel_does(caplog):
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16))
    before = {n: type(m) for n, m in model.named_modules()}
    lkt._apply_liger_kernel_to_instance(model=model, rms_norm=True)
    assert {n: type(m) for n, m in model.named_modules()} == before
    assert "no Liger patch for model_type 'bert'" in caplog.text


def test_instance_entry_point_drops_flags_the_family_does_not_take():
    from conftest import tiny_llama_config
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM(tiny_llama_config())
    # Trainer passes liger_kernel_config as is; geglu and an unknown key are not LLaMA's flags.
    lkt._apply_liger_kernel_to_instance(model=model, geglu=True, not_a_flag=1, rms_norm=False)
    assert type(model.model.norm).__name__ == "LlamaRMSNorm"
    assert type(model.model.layers[0].mlp).__name__ == "LigerLlamaMLP"
