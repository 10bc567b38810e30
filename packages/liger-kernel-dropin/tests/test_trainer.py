"""transformers' own switch: ``TrainingArguments(use_liger_kernel=True, liger_kernel_config=...)``.

transformers' Trainer checks ``is_liger_kernel_available()`` (an importable ``liger_kernel`` of version
>= 0.3.0), imports ``liger_kernel.transformers._apply_liger_kernel_to_instance`` and calls it on the model;
evaluation with ``prediction_loss_only`` passes ``skip_logits=True``. Each test trains a tiny LLaMA a few
steps twice from the same weights and data, stock and switched on, and compares the losses the Trainer
logs; the switched-on run must have run the vendor's kernels (counted) with no fallback.
"""

from __future__ import annotations

import warnings

import torch
from conftest import need, tiny_llama_config

STEPS = 2
EVAL_BATCHES = 1
LOSS_TOL = {"atol": 1e-4, "rtol": 1e-5}


class TokenData(torch.utils.data.Dataset):
    """Sequences with structure (mostly each token's successor follows it), so training learns."""

    def __init__(self, n: int, length: int, vocab: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        start = torch.randint(0, vocab, (n, 1), generator=g)
        steps = torch.arange(length).unsqueeze(0)
        noise = (torch.rand(n, length, generator=g) < 0.2) * torch.randint(0, vocab, (n, length), generator=g)
        self.ids = (start + 7 * steps + noise) % vocab

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _train(tmp_path, state: dict, **liger) -> tuple[list[float], float, object]:
    from transformers import LlamaForCausalLM, Trainer, TrainingArguments

    model = LlamaForCausalLM(tiny_llama_config())
    model.load_state_dict(state)
    config = model.config
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=STEPS,
        per_device_train_batch_size=2,
        per_device_eval_batch_size=4,
        gradient_accumulation_steps=2,
        learning_rate=3e-3,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=0,
        data_seed=0,
        dataloader_num_workers=0,
        lr_scheduler_type="constant",
        prediction_loss_only=True,
        **liger,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=TokenData(16, 12, config.vocab_size, seed=0),
        eval_dataset=TokenData(4 * EVAL_BATCHES, 12, config.vocab_size, seed=1),
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        trainer.train()
        eval_loss = trainer.evaluate()["eval_loss"]
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == STEPS, trainer.state.log_history
    return losses, eval_loss, model


def _initial_state() -> dict:
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    return {k: v.clone() for k, v in LlamaForCausalLM(tiny_llama_config()).state_dict().items()}


def test_use_liger_kernel(tmp_path, kernel_calls, no_fallback):
    need("accelerate")
    from transformers.utils import is_liger_kernel_available

    assert is_liger_kernel_available()
    state = _initial_state()
    stock, stock_eval, _ = _train(tmp_path / "stock", state)
    assert sum(kernel_calls.values()) == 0, kernel_calls
    on, on_eval, model = _train(tmp_path / "on", state, use_liger_kernel=True)

    torch.testing.assert_close(torch.tensor(on), torch.tensor(stock), **LOSS_TOL)
    torch.testing.assert_close(on_eval, stock_eval, **LOSS_TOL)
    assert len({round(x, 5) for x in stock}) > 1, stock  # the steps changed the model
    assert type(model.model.norm).__name__ == "LigerLlamaRMSNorm"
    # Every forward of every micro-batch: 2 per step in training, then the eval batches (skip_logits=True there).
    forwards = 2 * STEPS + EVAL_BATCHES
    layers = model.config.num_hidden_layers
    assert kernel_calls["fused_linear_cross_entropy"] == forwards, kernel_calls
    # Each layer's input norm, then the final norm; the post-attention norm is fused with the residual add.
    assert kernel_calls["rms_norm"] == forwards * (layers + 1), kernel_calls
    assert kernel_calls["fused_add_rms_norm"] == forwards * layers, kernel_calls
    assert kernel_calls["rope"] == forwards * layers, kernel_calls
    assert kernel_calls["swiglu"] == forwards * layers, kernel_calls


def test_liger_kernel_config(tmp_path, kernel_calls, no_fallback):
    """``liger_kernel_config`` reaches the patch: RMSNorm off, the stock loss through Liger's cross-entropy."""
    need("accelerate")
    state = _initial_state()
    stock, stock_eval, _ = _train(tmp_path / "stock", state)
    config = {"rms_norm": False, "cross_entropy": True, "fused_linear_cross_entropy": False}
    on, on_eval, model = _train(tmp_path / "on", state, use_liger_kernel=True, liger_kernel_config=config)

    torch.testing.assert_close(torch.tensor(on), torch.tensor(stock), **LOSS_TOL)
    torch.testing.assert_close(on_eval, stock_eval, **LOSS_TOL)
    assert type(model.model.norm).__name__ == "LlamaRMSNorm"
    assert kernel_calls["rms_norm"] == 0 and kernel_calls["fused_linear_cross_entropy"] == 0, kernel_calls
    forwards = 2 * STEPS + EVAL_BATCHES
    assert kernel_calls["cross_entropy"] == forwards, kernel_calls
    assert kernel_calls["swiglu"] == forwards * model.config.num_hidden_layers, kernel_calls
