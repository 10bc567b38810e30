"""transformers' own hub-kernel switch runs this project's layers once `register_kernels_hub` ran:
``from_pretrained(..., use_kernels=True)``, transformers' ``kernelize`` and the ``kernels`` library's
``kernelize``, on tiny LLaMA and Qwen3 models built from configs, against the same model stock.

Where: the model is on CPU, so ``kernels`` looks up the ``cpu`` device type; the session forces
liger-ops-cuda's kernels onto CPU tensors in the Triton interpreter (``LIGER_BACKEND=cuda
TRITON_INTERPRET=1``), so the layers are registered for ``cpu`` here, while a plain
`register_kernels_hub()` registers the device types the installed vendor backends serve (cuda).
Float32 throughout; the kernels reorder float32 sums, so losses and gradients agree to rounding.
"""

from __future__ import annotations

import pytest
import torch
from tiny import count_ops, restore_stock_functions, save_tiny

from liger_core.transformers import kernels_hub, layers

LOSS_TOL = {"atol": 1e-5, "rtol": 1e-5}
GRAD_TOL = {"atol": 1e-5, "rtol": 1e-4}
LAYERS = 2


@pytest.fixture(scope="module")
def registered():
    return kernels_hub.register_kernels_hub(("cpu",), model_types=("llama", "qwen3"))


def _batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 103, (2, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[1, -3:] = 0  # one padded row
    labels = ids.masked_fill(mask == 0, -100)
    return dict(input_ids=ids, attention_mask=mask, labels=labels)


def _loss_and_grads(model, batch):
    model.zero_grad()
    loss = model(**batch).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _expected_calls(family: str) -> dict[str, int]:
    # Per forward: two norms a layer plus the final one (Qwen3: q and k norms too), one RoPE and one MLP a layer.
    norms = 2 * LAYERS + 1 + (2 * LAYERS if family == "qwen3" else 0)
    return {"rms_norm": norms, "rope": LAYERS, "swiglu": LAYERS}


def _assert_switched(model) -> None:
    layer = model.model.layers[0]
    assert layer.input_layernorm.forward.__func__ is kernels_hub.LigerRMSNorm.forward
    assert layer.mlp.forward.__func__ is kernels_hub.LigerSwiGLUMLP.forward
    (rope,) = layer.self_attn._kernel_funcs.values()
    assert rope.forward.__func__ is kernels_hub.LigerRotaryPosEmb.forward


def _stock(path: str):
    """The stock model's loss and gradients on the test batch (its RoPE function stock again, see
    `restore_stock_functions`); computed before the switched model is built."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path).train()
    restore_stock_functions(model)
    (rope,) = model.model.layers[0].self_attn._kernel_funcs.values()
    assert "forward" not in vars(rope)
    return _loss_and_grads(model, _batch())


def _compare(stock, switched, family: str) -> None:
    batch = _batch()
    stock_loss, stock_grads = stock
    warned = set(layers._WARNED)
    with count_ops() as calls:
        loss, grads = _loss_and_grads(switched, batch)
    assert layers._WARNED == warned, layers._WARNED - warned  # no stock fallback
    assert dict(calls) == _expected_calls(family), dict(calls)
    torch.testing.assert_close(loss, stock_loss, **LOSS_TOL)
    assert grads.keys() == stock_grads.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], stock_grads[name], **GRAD_TOL, msg=name)


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_from_pretrained_use_kernels(family, tmp_path, registered):
    from transformers import AutoModelForCausalLM

    path = save_tiny(family, tmp_path)
    stock = _stock(path)
    switched = AutoModelForCausalLM.from_pretrained(path, use_kernels=True).train()
    assert switched.use_kernels
    _assert_switched(switched)
    _compare(stock, switched, family)


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_kernelize(family, tmp_path, registered):
    """transformers' ``kernelize`` (the model's mode) and the kernels library's (``TRAINING | TORCH_COMPILE``)."""
    from kernels import Mode
    from kernels import kernelize as kernels_kernelize
    from transformers import AutoModelForCausalLM
    from transformers.integrations.hub_kernels import kernelize

    path = save_tiny(family, tmp_path)
    stock = _stock(path)
    switched = AutoModelForCausalLM.from_pretrained(path).train()
    kernelize(switched, mode=Mode.TRAINING)
    _assert_switched(switched)
    _compare(stock, switched, family)

    compiled = AutoModelForCausalLM.from_pretrained(path).train()
    kernels_kernelize(compiled, mode=Mode.TRAINING | Mode.TORCH_COMPILE, device="cpu")
    _assert_switched(compiled)
    _compare(stock, compiled, family)


def test_unregistered_device_keeps_stock(tmp_path, registered):
    """A device type not registered (mps here) keeps every stock forward, MLPs included (their mark's condition)."""
    from kernels import Mode
    from kernels import kernelize as kernels_kernelize
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(save_tiny("llama", tmp_path)).train()
    kernels_kernelize(model, mode=Mode.TRAINING, device="mps")
    layer = model.model.layers[0]
    assert layer.mlp.forward.__func__ is type(layer.mlp).forward
    assert layer.input_layernorm.forward.__func__ is type(layer.input_layernorm).forward


def test_default_device_types_are_the_vendor_backends():
    """Without ``device_types``, the installed vendor backends' device types (the session installs liger-ops-cuda)."""
    assert kernels_hub.served_device_types() == ("cuda",)
    mapping = kernels_hub.kernel_mapping(kernels_hub.served_device_types())
    assert set(mapping) == {"RMSNorm", "rotary_pos_emb", "SwiGLUMLP", "GeGLUMLP"}
    assert all(set(by_device) == {"cuda"} for by_device in mapping.values())


def test_registered_into_transformers_default_mapping(registered):
    """transformers re-registers its default mapping on every ``use_kernels=True``: ours is written into it,
    for the registered device and modes only (its own cuda entries stay)."""
    from kernels import Mode
    from transformers.integrations.hub_kernels import get_kernel_mapping_transformers

    default = get_kernel_mapping_transformers()
    cpu = default["RMSNorm"]["cpu"]
    assert set(cpu) == {Mode.TRAINING, Mode.TRAINING | Mode.TORCH_COMPILE}
    assert cpu[Mode.TRAINING].load() is kernels_hub.LigerRMSNorm
    assert not any(isinstance(repo, kernels_hub.LigerRepository) for repo in default["RMSNorm"]["cuda"].values())


@pytest.mark.parametrize(
    ("devices", "message"),
    [(("gpu",), "not a kernels device type"), (("mps",), "no Liger vendor backend serves 'mps'")],
)
def test_bad_device_types(devices, message, monkeypatch):
    monkeypatch.delenv("LIGER_BACKEND", raising=False)
    from liger_core import registry

    registry.reset()
    try:
        with pytest.raises(ValueError, match=message):
            kernels_hub.register_kernels_hub(devices)
    finally:
        monkeypatch.undo()
        registry.reset()
