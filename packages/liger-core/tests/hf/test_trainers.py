"""The way in from the trainers: ``transformers.Trainer`` and TRL's ``SFTTrainer``/``DPOTrainer`` with Liger's kernels.

The recipe under test (README): build the model as usual, call
``apply_liger_kernel_to_instance(model)`` (or build it with ``AutoLigerKernelForCausalLM``) and
hand it to the trainer, leaving the trainer's own ``use_liger_kernel`` off (that flag imports
liger-kernel). Each test runs a few real optimizer steps through the trainer twice from the same
weights, data and seed, stock and patched, and compares the losses the trainer logs at every
step (float32; tolerances as the convergence tests'). Needs ``accelerate`` (Trainer), ``trl`` and
``datasets``; each test skips where its package is missing, unless ``LIGER_HF_TRAINERS=1`` (the
nox hf sessions, which install them) makes that a failure, so CI cannot pass by skipping them.
"""

from __future__ import annotations

import copy
import warnings

import torch
from hf_models import SIZES, build, initial_state
from trl_stand_ins import need

from liger_core import functional as F
from liger_core.transformers import apply_liger_kernel_to_instance
from liger_core.transformers import monkey_patch as mp

TINY = SIZES["tiny"]
LOSS_TOL = {"atol": 1e-4, "rtol": 1e-5}
# DPO's loss is far more sensitive to the weights than the language-model loss: with the test's data and
# settings, two stock runs whose weights differ by 1e-7 (normal noise) logged losses up to 1.3e-4 apart
# (Adam at 3e-3; 5e-5 even with plain SGD), and stock against Liger (liger-ops-cuda in the Triton
# interpreter) 1.1e-4 to 1.4e-4. Its bound is a few times that noise floor; the loss moves by 0.01 to 0.07.
DPO_LOSS_TOL = {"atol": 5e-4, "rtol": 1e-5}
STEPS = 4
WORDS = [f"w{i}" for i in range(100)]


def _tokenizer():
    """A word-level tokenizer over the tiny vocabulary (no download): ids 0-2 special, 3-102 words."""
    need("tokenizers")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<bos>": 1, "<eos>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>")


def _sentences(n: int, seed: int) -> list[str]:
    """Word sequences with structure (each word mostly followed by its successor), so training learns."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        length = int(torch.randint(6, 14, (1,), generator=g))
        word = int(torch.randint(0, len(WORDS), (1,), generator=g))
        words = []
        for _ in range(length):
            words.append(WORDS[word])
            word = (
                (word * 7 + 3) % len(WORDS) if torch.rand(1, generator=g) < 0.75 else int(torch.randint(0, 100, (1,)))
            )
        out.append(" ".join(words))
    return out


def _run(make_trainer, patched: bool, state: dict, monkeypatch) -> tuple[list[float], int]:
    """Train ``STEPS`` steps from ``state``: (the per-step losses the trainer logged, fused-loss calls)."""
    calls = []
    fused = F.liger_fused_linear_cross_entropy
    monkeypatch.setattr(F, "liger_fused_linear_cross_entropy", lambda *a, **k: calls.append(1) or fused(*a, **k))
    model = build("llama", TINY, torch.float32, "cpu", state)
    if patched:
        apply_liger_kernel_to_instance(model)
        assert any(type(m).__name__ == "LigerLlamaRMSNorm" for m in model.modules())
    return _train_logged_losses(make_trainer(model)), len(calls)


def _train_logged_losses(trainer) -> list[float]:
    """Run ``trainer`` (``STEPS`` steps): the per-step losses it logged."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # trainers' own deprecation chatter
        trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == STEPS, trainer.state.log_history
    return losses


def _compare(make_trainer, monkeypatch, fused: bool = True, tol: dict = LOSS_TOL) -> None:
    """Stock and patched runs log the same loss at every step (within ``tol``); ``fused``: the patched run's loss
    was the fused one."""
    state = initial_state(build("llama", TINY, torch.float32, "cpu"))
    stock, _ = _run(make_trainer, False, state, monkeypatch)
    patched, calls = _run(make_trainer, True, state, monkeypatch)
    mp.revert_liger_kernel_patches()
    torch.testing.assert_close(torch.tensor(patched), torch.tensor(stock), **tol)
    assert len({round(x, 5) for x in stock}) > 1, stock  # the steps changed the model
    if fused:
        assert calls >= STEPS * 2, calls  # every micro-batch (2 per step) through the fused linear cross-entropy


def _trl_uses_own_head() -> bool:
    """Whether the installed TRL's SFTTrainer computes the loss with its own fused LM head."""
    import trl.trainer.utils

    return hasattr(trl.trainer.utils, "add_fused_lm_head")


def _common_args(tmp_path) -> dict:
    return dict(
        output_dir=str(tmp_path),
        max_steps=STEPS,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,  # the trainer then passes num_items_in_batch to the loss
        learning_rate=3e-3,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=0,
        data_seed=0,
        dataloader_num_workers=0,
        lr_scheduler_type="constant",
    )


def test_transformers_trainer(tmp_path, monkeypatch):
    need("accelerate")
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

    tokenizer = _tokenizer()
    data = [tokenizer(s) for s in _sentences(32, seed=0)]
    collator = DataCollatorForLanguageModeling(tokenizer, mlm=False)
    args = TrainingArguments(**_common_args(tmp_path))

    def make_trainer(model):
        return Trainer(model=model, args=args, train_dataset=data, data_collator=collator)

    _compare(make_trainer, monkeypatch)


def test_transformers_trainer_torch_compile(tmp_path, monkeypatch):
    """``TrainingArguments(torch_compile=True)``: the Trainer compiles the patched model (``aot_eager``, the
    AOTAutograd path Inductor takes, without Inductor's CPU compile time) and logs stock's compiled losses,
    with no graph break."""
    need("accelerate")
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

    tokenizer = _tokenizer()
    data = [tokenizer(s) for s in _sentences(32, seed=0)]
    # Every batch padded to 16 tokens (sentences hold 6 to 13 words): one shape, one compile per model.
    collator = DataCollatorForLanguageModeling(tokenizer, mlm=False, pad_to_multiple_of=16)
    args = TrainingArguments(**_common_args(tmp_path), torch_compile=True, torch_compile_backend="aot_eager")

    def make_trainer(model):
        model.config.use_cache = False
        trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=collator)
        assert args.torch_compile and args.torch_compile_backend == "aot_eager"
        return trainer

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    try:
        _compare(make_trainer, monkeypatch)
        breaks = dict(torch._dynamo.utils.counters["graph_break"])
        compiled_frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    finally:
        torch._dynamo.reset()
    assert compiled_frames > 0, "the Trainer compiled nothing"
    assert breaks == {}, breaks


def test_trl_sft_trainer(tmp_path, monkeypatch):
    """TRL's SFTTrainer computes its loss with its own fused LM head (``add_fused_lm_head``, TRL >= 1.0), which
    it installs on the model it is given: Liger's norms, RoPE and MLP kernels run under it, and the loss is TRL's.
    Patched before the trainer is built, so the patch keeps TRL's head."""
    need("trl")
    datasets = need("datasets")
    from trl import SFTConfig, SFTTrainer

    tokenizer = _tokenizer()
    data = datasets.Dataset.from_dict({"text": _sentences(32, seed=1)})
    args = SFTConfig(**_common_args(tmp_path), max_length=16, packing=False)

    def make_trainer(model):
        return SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer)

    _compare(make_trainer, monkeypatch, fused=_trl_uses_own_head() is False)


def test_trl_dpo_trainer(tmp_path, monkeypatch):
    """DPO: the policy's and the reference's log-probs come from logits (no labels), so the norms, RoPE and MLP
    kernels run in both (the reference model a copy of the policy as handed over)."""
    need("trl")
    datasets = need("datasets")
    from trl import DPOConfig, DPOTrainer

    tokenizer = _tokenizer()
    prompts = _sentences(16, seed=2)
    chosen = _sentences(16, seed=3)
    rejected = _sentences(16, seed=4)
    data = datasets.Dataset.from_dict({"prompt": prompts, "chosen": chosen, "rejected": rejected})
    args = DPOConfig(**_common_args(tmp_path), max_length=32, beta=0.1)

    def make_trainer(model):
        # The frozen reference: a copy of the model as handed over (patched in the patched run).
        ref = copy.deepcopy(model).eval()
        return DPOTrainer(model=model, ref_model=ref, args=args, train_dataset=data, processing_class=tokenizer)

    _compare(make_trainer, monkeypatch, fused=False, tol=DPO_LOSS_TOL)


# -- TRL's trainers with liger-core's fused losses ----------------------------------------------------------------
# TRL 1.16 has no liger-kernel loss path any more: its DPOTrainer, GRPOTrainer and KTOTrainer score completions with
# their own chunked LM head (``trl.trainer.utils.add_fused_lm_head``) and compute the loss in ``_compute_loss``;
# ``use_liger_kernel`` only applies liger-kernel's layer patches (and refuses its fused linear cross-entropy), and
# nothing in TRL imports ``liger_kernel.chunked_loss``. So the fused losses go in the way TRL's own liger path used
# to: a trainer whose ``_compute_loss`` takes the backbone's hidden states and the lm_head and calls the loss module
# (our ``LigerFusedLinearDPOLoss`` / ``LigerFusedLinearGRPOLoss``), everything else (data, collation, generation and
# rewards, optimizer, logging) TRL's. Stock and fused runs start from the same weights and seed and must log the same
# loss at every step.


# float32, SGD: the fused and stock runs' weights agreed to 7.5e-9 after 4 steps that moved them by up to 1e-2.
WEIGHT_TOL = {"atol": 1e-6, "rtol": 1e-5}


def _fused_loss_args(tmp_path) -> dict:
    # Plain SGD: the trained weights then differ by lr x the gradients' difference. (Adam turns gradients at the
    # noise floor, which both runs have on rarely used embedding rows, into full-size steps of random sign.)
    # float32 throughout: TRL's configs default to bf16 autocast, which rounds the two paths differently.
    common = _common_args(tmp_path)
    return {**common, "gradient_accumulation_steps": 1, "optim": "sgd", "learning_rate": 0.05, "bf16": False}


def _hidden_states(model, **kwargs) -> torch.Tensor:
    """The backbone's last hidden states (what TRL's fused head feeds its lm_head)."""
    return model.base_model(**kwargs).last_hidden_state


def _lm_head(model) -> torch.nn.Module:
    return model.get_output_embeddings()


def _run_trainer(make_trainer, state: dict) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Train ``STEPS`` steps from ``state``: the per-step losses the trainer logged, and the trained weights."""
    model = build("llama", TINY, torch.float32, "cpu", state)
    losses = _train_logged_losses(make_trainer(model))
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


def _compare_fused_loss(make_stock, make_fused, calls: list, tol: dict, weight_tol: dict) -> None:
    """Same logged losses and, since a loss value alone need not depend on the gradient (GRPO's on-policy loss
    is the advantages' weighted mean whatever the log-probs), the same trained weights."""
    state = initial_state(build("llama", TINY, torch.float32, "cpu"))
    stock, stock_weights = _run_trainer(make_stock, state)
    fused, fused_weights = _run_trainer(make_fused, state)
    assert len(calls) >= STEPS, calls  # every step's loss came from the fused loss
    torch.testing.assert_close(torch.tensor(fused), torch.tensor(stock), **tol)
    assert len({round(x, 5) for x in stock}) > 1, stock  # the data or the model changed between steps
    moved = max(float((stock_weights[k] - state[k]).abs().max()) for k in state)
    assert moved > 100 * weight_tol["atol"], moved  # training moved the weights well beyond the tolerance
    for name, want in stock_weights.items():
        torch.testing.assert_close(fused_weights[name], want, **weight_tol, msg=lambda m, n=name: f"{n}: {m}")


def test_trl_dpo_trainer_with_fused_dpo_loss(tmp_path):
    """DPOTrainer's steps with its loss from ``LigerFusedLinearDPOLoss`` (sigmoid DPO, reference model) against
    its stock loss."""
    need("trl")
    datasets = need("datasets")
    from trl import DPOConfig, DPOTrainer

    from liger_core.nn import LigerFusedLinearDPOLoss

    calls = []
    beta = 0.1

    class FusedDPOTrainer(DPOTrainer):
        def _compute_loss(self, model, inputs, return_outputs=False):
            kwargs = {k: inputs[k] for k in ("input_ids", "attention_mask")}
            target = inputs["input_ids"].masked_fill(inputs["completion_mask"] == 0, -100)[:, 1:]
            hidden = _hidden_states(model, **kwargs, use_cache=False)[:, :-1]
            with torch.no_grad():
                ref_hidden = _hidden_states(self.ref_model, **kwargs, use_cache=False)[:, :-1]
            head, ref_head = _lm_head(model), _lm_head(self.ref_model)
            loss_fn = LigerFusedLinearDPOLoss(beta=beta, use_ref_model=True)
            loss, _ = loss_fn(
                head.weight, hidden, target, head.bias, ref_hidden, ref_head.weight, ref_head.bias
            )  # fmt: skip
            calls.append(1)
            return loss

    tokenizer = _tokenizer()
    prompts, chosen, rejected = (_sentences(16, seed=s) for s in (2, 3, 4))
    data = datasets.Dataset.from_dict({"prompt": prompts, "chosen": chosen, "rejected": rejected})
    args = DPOConfig(**_fused_loss_args(tmp_path), max_length=32, beta=beta)

    def make(trainer_cls):
        def make_trainer(model):
            ref = copy.deepcopy(model).eval()
            return trainer_cls(model=model, ref_model=ref, args=args, train_dataset=data, processing_class=tokenizer)

        return make_trainer

    _compare_fused_loss(make(DPOTrainer), make(FusedDPOTrainer), calls, LOSS_TOL, WEIGHT_TOL)


def test_trl_grpo_trainer_with_fused_grpo_loss(tmp_path):
    """GRPOTrainer's steps (generation by the tiny model, a reward, group advantages) with its loss from
    ``LigerFusedLinearGRPOLoss`` (TRL's default dapo loss, on-policy) against its stock loss."""
    need("trl")
    datasets = need("datasets")
    from trl import GRPOConfig, GRPOTrainer

    from liger_core.nn import LigerFusedLinearGRPOLoss

    calls = []

    class FusedGRPOTrainer(GRPOTrainer):
        def _compute_loss(self, model, inputs):
            # One process, one micro-batch per generation batch: TRL's normaliser is num_items_in_batch alone.
            assert self.current_gradient_accumulation_steps == 1 and self.accelerator.num_processes == 1
            completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
            input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
            attention_mask = torch.cat([inputs["prompt_mask"], completion_mask], dim=1)
            hidden = _hidden_states(model, input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
            hidden = hidden[:, -completion_ids.shape[1] - 1 : -1]  # the positions that predict the completion
            head = _lm_head(model)
            loss_fn = LigerFusedLinearGRPOLoss(
                beta=self.beta, loss_type=self.loss_type, epsilon_low=self.epsilon_low,
                epsilon_high=self.epsilon_high, temperature=self.temperature,
            )  # fmt: skip
            loss, _ = loss_fn(
                hidden, head.weight, completion_ids, completion_mask, inputs["advantages"], head.bias,
                old_per_token_logps=inputs.get("old_per_token_logps"),
                num_items_in_batch=float(inputs["num_items_in_batch"]),
            )  # fmt: skip
            calls.append(1)
            return loss

    def reward_distinct_words(completions, **_):
        return [float(len(set(c.split()))) for c in completions]

    tokenizer = _tokenizer()
    data = datasets.Dataset.from_dict({"prompt": [" ".join(s.split()[:4]) for s in _sentences(16, seed=5)]})
    options = {**_fused_loss_args(tmp_path), "per_device_train_batch_size": 4, "num_generations": 2}
    args = GRPOConfig(**options, max_completion_length=6, temperature=1.0, beta=0.0, loss_type="dapo")

    def make(trainer_cls):
        def make_trainer(model):
            return trainer_cls(
                model=model, reward_funcs=reward_distinct_words, args=args, train_dataset=data,
                processing_class=tokenizer,
            )  # fmt: skip

        return make_trainer

    _compare_fused_loss(make(GRPOTrainer), make(FusedGRPOTrainer), calls, LOSS_TOL, WEIGHT_TOL)
