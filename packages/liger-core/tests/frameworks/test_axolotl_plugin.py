"""The axolotl plugin, through axolotl's own plugin machinery (axolotl 0.19 installed ``--no-deps`` with the
modules its plugin loader imports: peft, addict, pydantic): ``PluginManager.register`` loads it by the import
path a YAML names, the plugin's ``register`` and axolotl's ``pre_model_load`` hook run with an axolotl
``DictDefault`` config as axolotl's loader would, then a model built afterwards runs this project's kernels
(calls counted) and matches the stock model's loss and gradients.
"""

from __future__ import annotations

import pytest
import torch
from tiny import config, count_ops

from liger_core.transformers import layers

PLUGIN = "liger_core.integrations.axolotl.LigerPlugin"
LOSS_TOL = {"atol": 1e-5, "rtol": 1e-5}
GRAD_TOL = {"atol": 1e-5, "rtol": 1e-4}


def _manager():
    from axolotl.integrations.base import PluginManager

    manager = PluginManager.get_instance()
    manager.register(PLUGIN)
    assert PLUGIN in manager.plugins, "axolotl could not load the plugin by its import path"
    return manager


def _cfg(**options):
    from axolotl.utils.dict import DictDefault

    return DictDefault({"plugins": [PLUGIN], "base_model": "tiny", "model_config_type": "llama", **options})


def _loss_and_grads(model, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 103, (2, 12), generator=g)
    model.zero_grad()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _build(state=None):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config("llama"), dtype=torch.float32)
    if state is not None:
        model.load_state_dict(state)
    return model.train()


def test_plugin_through_axolotl_pre_model_load():
    stock = _build()
    state = {k: v.clone() for k, v in stock.state_dict().items()}
    stock_loss, stock_grads = _loss_and_grads(stock)

    manager = _manager()
    assert "liger_core.integrations.axolotl.LigerArgs" in manager.get_input_args()
    cfg = _cfg(liger_rope=True, liger_rms_norm=True, liger_glu_activation=True, liger_fused_linear_cross_entropy=True)
    for plugin in manager.plugins.values():
        plugin.register(cfg)
    manager.pre_model_load(cfg)

    model = _build(state)
    layer = model.model.layers[0]
    assert type(layer.input_layernorm).__name__ == "LigerLlamaRMSNorm"
    assert type(layer.mlp).__name__ == "LigerLlamaMLP"
    warned = set(layers._WARNED)
    with count_ops() as calls:
        loss, grads = _loss_and_grads(model)
    assert layers._WARNED == warned, layers._WARNED - warned
    for op in ("rope", "swiglu", "fused_linear_cross_entropy"):
        assert calls[op] >= 1, dict(calls)
    assert calls["rms_norm"] + calls["fused_add_rms_norm"] >= 3, dict(calls)
    torch.testing.assert_close(loss, stock_loss, **LOSS_TOL)
    for name in grads:
        torch.testing.assert_close(grads[name], stock_grads[name], **GRAD_TOL, msg=name)


def test_options_are_honoured():
    """An option left off leaves its op stock: only RMSNorm asked for here."""
    manager = _manager()
    manager.pre_model_load(_cfg(liger_rms_norm=True))
    model = _build()
    layer = model.model.layers[0]
    assert type(layer.input_layernorm).__name__ == "LigerLlamaRMSNorm"
    assert type(layer.mlp).__name__ == "LlamaMLP"
    with count_ops() as calls:
        _loss_and_grads(model)
    assert calls["rms_norm"] >= 1 and not calls["swiglu"] and not calls["rope"], dict(calls)
    assert not calls["fused_linear_cross_entropy"], dict(calls)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"liger_cross_entropy": True, "liger_fused_linear_cross_entropy": True}, "set one of them"),
        ({"liger_kernel_impl": "cutile"}, "liger_kernel_impl: not offered"),
        ({"model_config_type": "no_such_model", "liger_rms_norm": True}, "no patch for 'no_such_model'"),
    ],
)
def test_bad_options(options, message):
    manager = _manager()
    with pytest.raises(ValueError, match=message):
        manager.plugins[PLUGIN].pre_model_load(_cfg(**options))
