"""LLaMA-Factory's, OpenRLHF's and verl's Liger switches, on tiny models from configs.

- LLaMA-Factory (``enable_liger_kernel: true``): its own ``llamafactory.model.model_utils.liger_kernel.
  apply_liger_kernel(config, model_args, is_trainable, require_logits)``, which imports
  ``liger_kernel.transformers.apply_liger_kernel_to_<model_type>`` and calls it before the model is built
  (``fused_linear_cross_entropy=False, cross_entropy=True`` when the stage needs logits). The package is
  installed with ``--no-deps`` and only that module is loaded (its package ``__init__`` files import the
  whole training stack); its relative imports (``extras.logging``) load for real.
- OpenRLHF (``--use_liger_kernel``): ``openrlhf.models.Actor`` imports flash-attn and DeepSpeed, which do not
  install on a CPU machine, so the test makes the call its released code (0.11.2, ``models/actor.py``) makes:
  ``from liger_kernel.transformers import AutoLigerKernelForCausalLM`` then ``from_pretrained(path,
  trust_remote_code=True, attn_implementation=..., quantization_config=None, torch_dtype=..., device_map=None)``.
- verl (``use_liger: true``): its FSDP engine (0.9.1, ``workers/engine/fsdp/transformer_impl.py``) needs a
  distributed GPU setup; the test makes its call, ``from liger_kernel.transformers.monkey_patch import
  _apply_liger_kernel_to_instance`` then ``_apply_liger_kernel_to_instance(model=module,
  fused_linear_cross_entropy=False, swiglu=True)``, on a built model.

Each compares the switched-on model's loss (or logits) and gradients with the stock model's from the same
weights and counts the vendor kernels that ran.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from importlib.metadata import distribution
from pathlib import Path

import pytest
import torch
from conftest import TINY_SIZES, need, tiny_llama_config

TOL = {"atol": 2e-5, "rtol": 1e-4}


def _load_module_alone(dist: str, module: str):
    """``module`` of the installed distribution ``dist``, without running its parent packages' ``__init__``
    (each parent is an empty package over its real folder, so relative imports of siblings still load)."""
    root = Path(distribution(dist).locate_file(""))
    parts = module.split(".")
    for i in range(1, len(parts)):
        name = ".".join(parts[:i])
        if name not in sys.modules:
            pkg = types.ModuleType(name)
            pkg.__path__ = [str(root.joinpath(*parts[:i]))]
            sys.modules[name] = pkg
    spec = importlib.util.spec_from_file_location(module, root.joinpath(*parts[:-1], parts[-1] + ".py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module] = mod
    spec.loader.exec_module(mod)
    return mod


def _config(model_type: str):
    from transformers import AutoConfig

    if model_type == "llama":
        return tiny_llama_config()
    extra = {"head_dim": 8} if model_type == "gemma" else {}
    return AutoConfig.for_model(model_type, **TINY_SIZES, **extra)


def _batch(vocab: int) -> dict:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (2, 12), generator=g)
    return {"input_ids": ids, "labels": ids}


def _loss_and_grads(model, batch) -> tuple[torch.Tensor, dict]:
    model.train()
    loss = model(**batch).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _same(a: tuple, b: tuple) -> None:
    torch.testing.assert_close(a[0], b[0], **TOL)
    assert a[1].keys() == b[1].keys()
    for name in a[1]:
        torch.testing.assert_close(a[1][name], b[1][name], **TOL, msg=name)


@pytest.fixture(scope="module")
def llamafactory_liger():
    need("llamafactory")
    need("peft")  # llamafactory.extras.constants imports it
    return _load_module_alone("llamafactory", "llamafactory.model.model_utils.liger_kernel")


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "gemma"])
@pytest.mark.parametrize("require_logits", [False, True], ids=["sft", "needs-logits"])
def test_llamafactory_enable_liger_kernel(llamafactory_liger, model_type, require_logits, kernel_calls, no_fallback):
    from transformers import AutoModelForCausalLM

    config = _config(model_type)
    torch.manual_seed(0)
    stock_model = AutoModelForCausalLM.from_config(config)
    state = stock_model.state_dict()
    batch = _batch(config.vocab_size)
    stock = _loss_and_grads(stock_model, batch)
    assert sum(kernel_calls.values()) == 0

    model_args = types.SimpleNamespace(enable_liger_kernel=True)
    # LLaMA-Factory patches before it builds the model (model/patcher.py, patch_config).
    llamafactory_liger.apply_liger_kernel(config, model_args, is_trainable=True, require_logits=require_logits)
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(state)
    _same(_loss_and_grads(model, batch), stock)

    layers = config.num_hidden_layers
    norm = "rms_norm"
    assert kernel_calls[norm] >= layers + 1, kernel_calls
    assert kernel_calls["rope"] == layers, kernel_calls
    assert kernel_calls["geglu" if model_type == "gemma" else "swiglu"] == layers, kernel_calls
    if require_logits:
        assert kernel_calls["cross_entropy"] == 1 and kernel_calls["fused_linear_cross_entropy"] == 0, kernel_calls
        assert model(**batch).logits is not None
    else:
        assert kernel_calls["fused_linear_cross_entropy"] == 1 and kernel_calls["cross_entropy"] == 0, kernel_calls


def test_llamafactory_skips_when_switched_off(llamafactory_liger, kernel_calls):
    """``enable_liger_kernel: false``: nothing is patched."""
    from transformers import AutoModelForCausalLM

    config = _config("llama")
    llamafactory_liger.apply_liger_kernel(
        config, types.SimpleNamespace(enable_liger_kernel=False), is_trainable=True, require_logits=False
    )
    model = AutoModelForCausalLM.from_config(config)
    assert type(model.model.norm).__name__ == "LlamaRMSNorm"


def test_openrlhf_auto_liger_kernel_for_causal_lm(tmp_path, kernel_calls, no_fallback):
    from transformers import AutoModelForCausalLM

    config = _config("qwen2")
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    stock_model = AutoModelForCausalLM.from_pretrained(tmp_path, torch_dtype=torch.float32)
    batch = _batch(config.vocab_size)
    # OpenRLHF's actor computes log-probs from the logits (no labels): compare logits and their gradient.
    ids = {"input_ids": batch["input_ids"]}
    stock_logits = stock_model(**ids).logits
    stock_logits.logsumexp(-1).sum().backward()

    from liger_kernel.transformers import AutoLigerKernelForCausalLM

    model = AutoLigerKernelForCausalLM.from_pretrained(
        str(tmp_path),
        trust_remote_code=True,
        attn_implementation="sdpa",
        quantization_config=None,
        torch_dtype=torch.float32,
        device_map=None,
    )
    assert type(model.model.norm).__name__ == "LigerQwen2RMSNorm"
    logits = model(**ids).logits
    logits.logsumexp(-1).sum().backward()
    torch.testing.assert_close(logits, stock_logits, **TOL)
    stock_grads = dict(stock_model.named_parameters())
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, stock_grads[name].grad, **TOL, msg=name)
    layers = config.num_hidden_layers
    assert kernel_calls["rope"] == layers and kernel_calls["swiglu"] == layers, kernel_calls
    assert kernel_calls["rms_norm"] >= layers + 1, kernel_calls


def test_verl_apply_liger_kernel_to_instance(kernel_calls, no_fallback):
    from transformers import AutoModelForCausalLM

    config = _config("qwen2")
    torch.manual_seed(0)
    module = AutoModelForCausalLM.from_config(config)
    state = {k: v.clone() for k, v in module.state_dict().items()}
    stock_model = AutoModelForCausalLM.from_config(config)
    stock_model.load_state_dict(state)
    batch = _batch(config.vocab_size)
    stock = _loss_and_grads(stock_model, batch)

    from liger_kernel.transformers.monkey_patch import _apply_liger_kernel_to_instance

    _apply_liger_kernel_to_instance(model=module, fused_linear_cross_entropy=False, swiglu=True)
    _same(_loss_and_grads(module, batch), stock)
    layers = config.num_hidden_layers
    assert kernel_calls["swiglu"] == layers and kernel_calls["rope"] == layers, kernel_calls
    assert kernel_calls["fused_linear_cross_entropy"] == 0, kernel_calls  # verl computes its own loss from logits
