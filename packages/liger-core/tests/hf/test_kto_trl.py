"""`fused_linear_kto` (through ``LigerFusedLinearKTOLoss``, so whichever backend serves the device:
liger-ops-cuda's kernels in the Triton interpreter in the ``hf-interpreter`` session, the reference
in ``hf-oldest``) against TRL's own ``KTOTrainer._compute_loss`` (TRL 1.x): its KL estimate from
the mismatched completions, its reference pass, its loss, and the metrics it logs, on the same
hidden states, lm_head and batch. TRL runs its own fused lm_head (``add_fused_lm_head``).

As in test_preference_trl.py: the trainer's method runs on a stand-in for the trainer (the
attributes it reads) and stand-in models whose backbone returns fixed hidden states (leaves, so both
sides' gradients can be compared). The backbone answers TRL's two calls per model (the completions
and, without gradient, the KL completions) with the hidden states of the ids it is given. Ours gets
the shifted view TRL's fused head scores, and the KL estimate the caller (TRL) computes: the batch
mean of the KL completions' policy minus reference log-probs, clamped at 0. float32 throughout.
"""

from __future__ import annotations

import collections
import types

import pytest
import torch
from trl_stand_ins import StandInAccelerator, StandInCausalLM, need

BATCH, SEQ, HIDDEN, VOCAB = 6, 12, 32, 150
TOL = {"atol": 2e-5, "rtol": 2e-5}


def _batch(seed: int):
    """TRL's KTO batch: completions with labels, and the KL completions (the completions cycled by
    one within the batch, as TRL's collator builds them), each with the policy's and the reference
    model's hidden states."""
    g = torch.Generator().manual_seed(seed)

    def ids_and_mask():
        ids = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
        prompt = torch.randint(1, SEQ // 2, (BATCH,), generator=g)
        mask = (torch.arange(SEQ + 1)[None, :] >= prompt[:, None]).long()
        mask[-1, -2:] = 0  # right padding on one sequence
        return ids, mask

    def hidden_pair():
        h = torch.randn(BATCH, SEQ + 1, HIDDEN, generator=g)
        return h, h + 0.3 * torch.randn(BATCH, SEQ + 1, HIDDEN, generator=g)

    weight = torch.randn(VOCAB, HIDDEN, generator=g) * (2.0 / HIDDEN**0.5)
    bias = torch.randn(VOCAB, generator=g) * 0.5
    ref_weight = weight + torch.randn(VOCAB, HIDDEN, generator=g) * (0.3 / HIDDEN**0.5)
    labels = torch.tensor([True, False, True, True, False, False])
    input_ids, completion_mask = ids_and_mask()
    kl_ids, kl_mask = ids_and_mask()
    hidden, ref_hidden = hidden_pair()
    kl_hidden, kl_ref_hidden = hidden_pair()
    return types.SimpleNamespace(**locals())


def _trl_kto(b, loss_type: str, beta: float, desirable_weight: float, undesirable_weight: float):
    """TRL's loss, gradients (hidden states, lm_head weight and bias) and logged metrics."""
    need("trl")
    from trl.trainer.kto_trainer import KTOTrainer
    from trl.trainer.utils import add_fused_lm_head

    h = b.hidden.clone().requires_grad_()
    model = StandInCausalLM({b.input_ids.data_ptr(): h, b.kl_ids.data_ptr(): b.kl_hidden}, b.weight, b.bias).train()
    add_fused_lm_head(model, outputs=("log_probs", "entropy", "mean_logits"))
    ref_hidden_of = {b.input_ids.data_ptr(): b.ref_hidden, b.kl_ids.data_ptr(): b.kl_ref_hidden}
    ref_model = StandInCausalLM(ref_hidden_of, b.ref_weight, None)
    add_fused_lm_head(ref_model.eval())
    inputs = {
        "input_ids": b.input_ids,
        "attention_mask": torch.ones_like(b.input_ids),
        "completion_mask": b.completion_mask,
        "label": b.labels,
    }
    calculate_kl = loss_type == "kto"
    if calculate_kl:
        inputs.update(KL_input_ids=b.kl_ids, KL_attention_mask=torch.ones_like(b.kl_ids), KL_completion_mask=b.kl_mask)
    trainer = types.SimpleNamespace(
        model=model,
        ref_model=ref_model,
        accelerator=StandInAccelerator(),
        args=types.SimpleNamespace(gradient_checkpointing_kwargs=None),
        calculate_KL=calculate_kl,
        precompute_ref_logps=False,
        aux_loss_enabled=False,
        loss_type=loss_type,
        beta=beta,
        desirable_weight=desirable_weight,
        undesirable_weight=undesirable_weight,
        _metrics=collections.defaultdict(lambda: collections.defaultdict(list)),
        _total_train_tokens=0,
        _tp_size=1,
    )
    trainer._compute_kl_logps = types.MethodType(KTOTrainer._compute_kl_logps, trainer)
    loss = KTOTrainer._compute_loss(trainer, model, inputs, return_outputs=False)
    loss.backward()
    grads = (h.grad[:, :-1], model.lm_head.weight.grad, model.lm_head.bias.grad)
    metrics = {k: v[0] for k, v in trainer._metrics["train"].items()}
    return loss.detach(), grads, metrics


def _sequence_logps(hidden, weight, bias, ids, mask):
    """The caller's side of the KL estimate: each sequence's summed completion log-probs."""
    target = ids.masked_fill(mask == 0, -100)[:, 1:]
    logits = torch.nn.functional.linear(hidden[:, :-1], weight, bias).float()
    valid = target != -100
    logp = logits.log_softmax(-1).gather(-1, torch.where(valid, target, 0)[..., None]).squeeze(-1)
    return torch.where(valid, logp, 0.0).sum(-1)


def _ours(b, loss_type: str, beta: float, desirable_weight: float, undesirable_weight: float):
    from liger_core.nn import LigerFusedLinearKTOLoss

    kl = None
    if loss_type == "kto":
        with torch.no_grad():
            policy = _sequence_logps(b.kl_hidden, b.weight, b.bias, b.kl_ids, b.kl_mask)
            ref = _sequence_logps(b.kl_ref_hidden, b.ref_weight, None, b.kl_ids, b.kl_mask)
            kl = (policy - ref).mean().clamp(min=0)
    target = b.input_ids.masked_fill(b.completion_mask == 0, -100)[:, 1:]
    x = b.hidden[:, :-1].clone().requires_grad_()
    w = b.weight.clone().requires_grad_()
    bb = b.bias.clone().requires_grad_()
    loss_fn = LigerFusedLinearKTOLoss(
        beta=beta, use_ref_model=True, desirable_weight=desirable_weight, undesirable_weight=undesirable_weight
    )
    loss, metrics = loss_fn(x, w, target, bb, b.labels, b.ref_hidden[:, :-1], b.ref_weight, None, kl)
    loss.backward()
    return loss.detach(), (x.grad, w.grad, bb.grad), metrics, kl, target


# Seeds whose KL completions give a positive estimate (TRL clamps a negative one to 0).
@pytest.mark.parametrize(
    ("loss_type", "beta", "desirable_weight", "undesirable_weight", "seed"),
    [("kto", 0.1, 1.0, 1.0, 1), ("kto", 0.5, 1.33, 0.7, 4), ("apo_zero_unpaired", 0.3, 1.0, 1.0, 3)],
)
def test_kto_matches_trl(loss_type, beta, desirable_weight, undesirable_weight, seed):
    b = _batch(seed)
    trl_loss, trl_grads, m = _trl_kto(b, loss_type, beta, desirable_weight, undesirable_weight)
    loss, grads, metrics, kl, target = _ours(b, loss_type, beta, desirable_weight, undesirable_weight)
    if loss_type == "kto":
        assert kl > 0.1, "the batch must exercise the KL term (not clamped to 0)"
        assert m["kl"] == pytest.approx(float(kl), rel=2e-5, abs=2e-5)
    torch.testing.assert_close(loss, trl_loss.float(), **TOL)
    for got, want in zip(grads, trl_grads):
        torch.testing.assert_close(got, want, **TOL)
    # The metrics the trainer logs, from our outputs.
    c_logps, r_logps, c_logits, r_logits, c_rewards, r_rewards = metrics
    n_chosen = int(b.labels.sum())
    n_rejected = BATCH - n_chosen
    counted = (target != -100).sum(-1)
    c_tokens, r_tokens = int(counted[b.labels].sum()), int(counted[~b.labels].sum())
    want = {
        "logps/chosen": c_logps / n_chosen,
        "logps/rejected": r_logps / n_rejected,
        "logits/chosen": c_logits / (VOCAB * c_tokens),
        "logits/rejected": r_logits / (VOCAB * r_tokens),
        "rewards/chosen": c_rewards / n_chosen,
        "rewards/rejected": r_rewards / n_rejected,
        "rewards/margins": c_rewards / n_chosen - r_rewards / n_rejected,
    }
    for key, value in want.items():
        assert m[key] == pytest.approx(float(value), rel=2e-5, abs=2e-5), key
