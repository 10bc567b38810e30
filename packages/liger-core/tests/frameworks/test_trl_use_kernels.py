"""TRL's own switch (TRL 1.16 deprecates ``use_liger_kernel`` for it): ``SFTConfig(model_init_kwargs=
{"use_kernels": True})`` with the model given by path, so TRL builds it with ``from_pretrained(...,
use_kernels=True)``; after `register_kernels_hub` that runs this project's layers. A few real steps,
stock against switched on from the same weights, data and seed: the losses TRL logs match at every step.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from tiny import count_ops, restore_stock_functions, save_tiny, sentences, tokenizer

from liger_core.transformers import kernels_hub

STEPS = 3
GA = 2
# Measured: inside the trainer the first logged loss (before any update) differs by up to 2.3e-4 (5e-5
# relative) between stock and switched, while the same batches through the same two models outside the
# trainer agree to 1e-6; not yet explained (each of the RoPE and MLP swaps alone moves it by about 1e-4, the
# norms alone by nothing), and by the third step (Adam at 3e-3) by 8.6e-4. The bound is about twice that;
# a wrong layer moves the loss by far more (a stock RMSNorm arithmetic error is in the first digit).
LOSS_TOL = {"atol": 2e-3, "rtol": 1e-5}


def _train(path: str, out, use_kernels: bool) -> tuple[list[float], object]:
    import datasets
    from trl import SFTConfig, SFTTrainer

    kwargs = {"use_kernels": True} if use_kernels else {}
    args = SFTConfig(
        output_dir=str(out),
        max_steps=STEPS,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=GA,
        learning_rate=3e-3,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=0,
        data_seed=0,
        dataloader_num_workers=0,
        lr_scheduler_type="constant",
        max_length=16,
        packing=False,
        model_init_kwargs=kwargs,
    )
    data = datasets.Dataset.from_dict({"text": sentences(24, seed=1)})
    trainer = SFTTrainer(model=path, args=args, train_dataset=data, processing_class=tokenizer())
    if not use_kernels:
        restore_stock_functions(trainer.model)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == STEPS, trainer.state.log_history
    return losses, trainer.model


@pytest.mark.parametrize("family", ["llama"])  # Qwen3 runs in test_kernels_hub; one trainer run costs ~50 s
def test_sft_trainer_model_init_kwargs_use_kernels(family, tmp_path):
    kernels_hub.register_kernels_hub(("cpu",), model_types=(family,))
    path = save_tiny(family, tmp_path / "model")
    stock, stock_model = _train(path, tmp_path / "stock", use_kernels=False)
    assert not stock_model.use_kernels
    with count_ops() as calls:
        switched, model = _train(path, tmp_path / "switched", use_kernels=True)
    assert model.use_kernels
    assert model.model.layers[0].mlp.forward.__func__ is kernels_hub.LigerSwiGLUMLP.forward
    # Every micro-batch (2 a step) ran each layer's kernels: forward calls alone are 2 * STEPS * layers.
    assert min(calls[op] for op in ("rms_norm", "rope", "swiglu")) >= 2 * STEPS * 2, dict(calls)
    torch.testing.assert_close(torch.tensor(switched), torch.tensor(stock), **LOSS_TOL)
    assert len({round(x, 4) for x in stock}) > 1, stock  # the steps changed the model
