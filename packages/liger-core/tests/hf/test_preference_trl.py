"""The preference losses against TRL's own code: `fused_linear_dpo` (through
``liger_core.functional``, so whichever backend serves the device: liger-ops-cuda's kernels in the
Triton interpreter in the ``hf-interpreter`` session, the reference in ``hf-oldest``) on the same
hidden states, lm_head and batch as TRL's ``DPOTrainer._compute_loss`` (TRL 1.x), which runs its
own fused lm_head (``trl.trainer.utils.add_fused_lm_head``) over the same hidden states.

The trainer's method runs on a stand-in for the trainer (the attributes it reads) and stand-in
models whose backbone returns fixed hidden states (leaves, so both sides' gradients can be
compared); everything between those hidden states and the loss, the metrics included, is TRL's.
The batch is TRL's: ``input_ids`` ``(2B, T + 1)``, chosen rows then rejected, a
``completion_mask`` that leaves out a prompt of random length. Ours gets the shifted view TRL's
fused head scores: hidden states ``[:, :-1]``, targets ``input_ids[:, 1:]`` with -100 outside the
completion. float32 throughout; tolerances cover the two sides' different summation orders.

`fused_linear_orpo` (through ``LigerFusedLinearORPOLoss``) against TRL's experimental
``ORPOTrainer``: its ``get_batch_logps`` and ``odds_ratio_loss`` on the full logits of the same
batch, and its NLL (cross-entropy over the chosen half). `fused_linear_cpo` and
`fused_linear_simpo` (through their nn modules) against TRL's experimental ``CPOTrainer`` the same
way (its ``get_batch_logps``, ``cpo_loss`` and NLL).
"""

from __future__ import annotations

import collections
import types

import pytest
import torch
from trl_stand_ins import StandInAccelerator, StandInCausalLM, need

from liger_core import functional as LF
from liger_core.ops.fused_linear_dpo import LOSS_TYPES

PAIRS, SEQ, HIDDEN, VOCAB = 3, 12, 32, 150
TOL = {"atol": 2e-5, "rtol": 2e-5}


def _batch(seed: int):
    g = torch.Generator().manual_seed(seed)
    n = 2 * PAIRS
    hidden = torch.randn(n, SEQ + 1, HIDDEN, generator=g)
    weight = torch.randn(VOCAB, HIDDEN, generator=g) * (2.0 / HIDDEN**0.5)
    bias = torch.randn(VOCAB, generator=g) * 0.5
    ref_hidden = hidden + 0.3 * torch.randn(n, SEQ + 1, HIDDEN, generator=g)
    ref_weight = weight + torch.randn(VOCAB, HIDDEN, generator=g) * (0.3 / HIDDEN**0.5)
    input_ids = torch.randint(0, VOCAB, (n, SEQ + 1), generator=g)
    prompt = torch.randint(1, SEQ // 2, (n,), generator=g)
    completion_mask = (torch.arange(SEQ + 1)[None, :] >= prompt[:, None]).long()
    completion_mask[-1, -2:] = 0  # right padding on one sequence
    return hidden, weight, bias, ref_hidden, ref_weight, input_ids, completion_mask


def _trl_dpo(batch, loss_types, loss_weights, beta, label_smoothing, use_ref_model, bias: bool, discopop_tau=0.05):
    """TRL's loss, gradients (hidden states, lm_head weight and bias) and logged metrics."""
    need("trl")
    from trl import DPOTrainer
    from trl.trainer.utils import add_fused_lm_head

    hidden, weight, b, ref_hidden, ref_weight, input_ids, completion_mask = batch
    h = hidden.clone().requires_grad_()
    fields = ("log_probs", "entropy", "mean_logits", "is_top1")
    model = StandInCausalLM(h, weight, b if bias else None).train()
    add_fused_lm_head(model, outputs=fields)
    ref_model = StandInCausalLM(ref_hidden, ref_weight, None).eval()
    add_fused_lm_head(ref_model)
    inputs = {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "completion_mask": completion_mask,
    }
    if not use_ref_model:
        # TRL's precomputed reference log-probs, zero: the reference-free loss.
        inputs["ref_chosen_logps"] = torch.zeros(PAIRS)
        inputs["ref_rejected_logps"] = torch.zeros(PAIRS)
    trainer = types.SimpleNamespace(
        model=model,
        ref_model=ref_model,
        accelerator=StandInAccelerator(),
        args=types.SimpleNamespace(gradient_checkpointing_kwargs=None, discopop_tau=discopop_tau),
        ld_alpha=None,
        precompute_ref_logps=not use_ref_model,
        aux_loss_enabled=False,
        f_divergence_type="reverse_kl",
        loss_types=loss_types,
        loss_weights=loss_weights,
        beta=beta,
        label_smoothing=label_smoothing,
        use_weighting=False,
        _metrics=collections.defaultdict(lambda: collections.defaultdict(list)),
        _total_train_tokens=0,
        _tp_size=1,
    )
    loss = DPOTrainer._compute_loss(trainer, model, inputs, return_outputs=False)
    loss.backward()
    grads = (h.grad[:, :-1], model.lm_head.weight.grad, model.lm_head.bias.grad if bias else None)
    metrics = {k: v[0] for k, v in trainer._metrics["train"].items()}
    return loss.detach(), grads, metrics


def _ours(batch, bias: bool, **options):
    hidden, weight, b, ref_hidden, ref_weight, input_ids, completion_mask = batch
    target = input_ids.masked_fill(completion_mask == 0, -100)[:, 1:]
    x = hidden[:, :-1].clone().requires_grad_()
    w = weight.clone().requires_grad_()
    bb = b.clone().requires_grad_() if bias else None
    use_ref = options.get("use_ref_model", True)
    ref = (ref_hidden[:, :-1], ref_weight, None) if use_ref else (None, None, None)
    outs = LF.liger_fused_linear_dpo(x, w, target, bb, *ref, **options)
    outs[0].backward()
    return outs, (x.grad, w.grad, bb.grad if bias else None)


def _compare(trl, ours):
    trl_loss, trl_grads, m = trl
    outs, grads = ours
    loss, c_logps, r_logps, c_logits, r_logits, _, c_rewards, r_rewards = outs
    torch.testing.assert_close(loss, trl_loss.float(), **TOL)
    for got, want in zip(grads, trl_grads):
        if want is not None:
            torch.testing.assert_close(got, want, **TOL)
    # The metrics the trainer logs, from our outputs.
    want = {
        "logps/chosen": c_logps.mean(),
        "logps/rejected": r_logps.mean(),
        "logits/chosen": c_logits,
        "logits/rejected": r_logits,
        "rewards/chosen": c_rewards.mean(),
        "rewards/rejected": r_rewards.mean(),
        "rewards/margins": (c_rewards - r_rewards).mean(),
        "rewards/accuracies": (c_rewards > r_rewards).float().mean(),
    }
    for key, value in want.items():
        assert m[key] == pytest.approx(float(value), rel=2e-5, abs=2e-5), key


@pytest.mark.parametrize("use_ref_model", [True, False], ids=["ref", "no_ref"])
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_dpo_loss_types_match_trl(loss_type, use_ref_model):
    smoothing = {"exo_pair": 1e-3, "robust": 0.2}.get(loss_type, 0.0)
    beta, tau = 0.5, 0.3
    batch = _batch(seed=LOSS_TYPES.index(loss_type) + (0 if use_ref_model else 100))
    trl = _trl_dpo(batch, [loss_type], [1.0], beta, smoothing, use_ref_model, bias=True, discopop_tau=tau)
    ours = _ours(
        batch, True, beta=beta, loss_type=loss_type, label_smoothing=smoothing, discopop_tau=tau,
        use_ref_model=use_ref_model,
    )  # fmt: skip
    _compare(trl, ours)


@pytest.mark.parametrize("alpha", [1.0, 0.4])
def test_dpo_nll_term_matches_trl_sft_loss(alpha):
    """Our NLL term (``compute_nll_loss``, ``alpha``) is TRL's ``"sft"`` loss weighted ``alpha``."""
    batch = _batch(seed=7)
    trl = _trl_dpo(batch, ["sigmoid", "sft"], [1.0, alpha], 0.2, 0.0, True, bias=False)
    ours = _ours(batch, False, beta=0.2, compute_nll_loss=True, alpha=alpha)
    _compare(trl, ours)
    # The NLL itself: the loss without it, plus alpha x nll, is the loss with it.
    plain, _ = _ours(batch, False, beta=0.2)
    torch.testing.assert_close(ours[0][0], plain[0] + alpha * ours[0][5], **TOL)


# -- ORPO, CPO and SimPO: TRL's experimental trainers, on the full logits --------------------------


def _full_logits(batch):
    """What TRL's experimental trainers score: leaf copies of the hidden states, lm_head weight and
    bias, the labels (-100 outside the completion) and the full logits."""
    hidden, weight, b, _, _, input_ids, completion_mask = batch
    labels = input_ids.masked_fill(completion_mask == 0, -100)
    h = hidden.clone().requires_grad_()
    w = weight.clone().requires_grad_()
    bb = b.clone().requires_grad_()
    return h, w, bb, labels, torch.nn.functional.linear(h, w, bb)


def _chosen_nll(logits, labels):
    """The NLL of the trainers' ``concatenated_forward``: cross-entropy over the chosen half's
    shifted labels."""
    shift = logits[:PAIRS, :-1].reshape(-1, VOCAB)
    return torch.nn.functional.cross_entropy(shift, labels[:PAIRS, 1:].reshape(-1), ignore_index=-100)


def _ours_module(batch, module):
    """Our nn ``module`` on the shifted view TRL's trainers score: ``(loss, its gradients w.r.t. the
    hidden states, lm_head weight and bias, metrics)``."""
    hidden, weight, b, _, _, input_ids, completion_mask = batch
    x = hidden[:, :-1].clone().requires_grad_()
    w = weight.clone().requires_grad_()
    bb = b.clone().requires_grad_()
    target = input_ids.masked_fill(completion_mask == 0, -100)[:, 1:]
    loss, metrics = module(w, x, target, bb)
    loss.backward()
    return loss, (x.grad, w.grad, bb.grad), metrics


def _assert_matches_trl(ours, trl_loss, trl_grads, trl_metrics: dict[int, torch.Tensor]) -> None:
    """Our module's ``(loss, grads, metrics)`` against TRL's loss, gradients and the metrics it
    computes (keyed by their index in our metrics)."""
    loss, grads, metrics = ours
    torch.testing.assert_close(loss, trl_loss, **TOL)
    for got, want in zip(grads, trl_grads):
        torch.testing.assert_close(got, want, **TOL)
    for index, want in trl_metrics.items():
        torch.testing.assert_close(metrics[index], want, **TOL)


# -- ORPO: TRL's ORPOTrainer (trl.experimental.orpo) ---------------------------------------------


def _trl_orpo(batch, beta: float, compute_nll_loss: bool):
    """TRL's ORPO loss (its ``get_batch_logps`` on the full logits, its ``odds_ratio_loss``, its
    ``loss = nll_loss - mean(losses)``), gradients and the log-odds metrics. The NLL is what its
    ``concatenated_forward`` computes: cross-entropy over the chosen half's shifted labels."""
    need("trl")
    from trl.experimental.orpo import ORPOTrainer

    h, w, bb, labels, logits = _full_logits(batch)
    logps = ORPOTrainer.get_batch_logps(logits, labels, average_log_prob=True)
    chosen, rejected = logps[:PAIRS], logps[PAIRS:]
    trainer = types.SimpleNamespace(beta=beta, accelerator=StandInAccelerator())
    losses, chosen_rewards, rejected_rewards, ratio, log_odds = ORPOTrainer.odds_ratio_loss(trainer, chosen, rejected)
    loss = -losses.mean()
    if compute_nll_loss:
        loss = loss + _chosen_nll(logits, labels)
    loss.backward()
    metrics = (chosen_rewards, rejected_rewards, ratio, log_odds)
    return loss.detach(), (h.grad[:, :-1], w.grad, bb.grad), metrics


@pytest.mark.parametrize("compute_nll_loss", [True, False])
@pytest.mark.parametrize("beta", [0.1, 0.8])
def test_orpo_matches_trl(beta, compute_nll_loss):
    from liger_core.nn import LigerFusedLinearORPOLoss

    batch = _batch(seed=int(beta * 10) + compute_nll_loss)
    trl_loss, trl_grads, (c_rewards, r_rewards, ratio, log_odds) = _trl_orpo(batch, beta, compute_nll_loss)
    ours = _ours_module(batch, LigerFusedLinearORPOLoss(beta=beta, compute_nll_loss=compute_nll_loss))
    _assert_matches_trl(ours, trl_loss, trl_grads, {5: c_rewards, 6: r_rewards, 7: ratio, 8: log_odds})


# -- CPO and SimPO: TRL's CPOTrainer (trl.experimental.cpo) --------------------------------------


def _trl_cpo(batch, loss_type: str, beta: float, label_smoothing: float, simpo_gamma: float, cpo_alpha: float):
    """TRL's CPO loss: its ``get_batch_logps`` (averaged for ipo and simpo, as its
    ``concatenated_forward``), its ``cpo_loss``, ``losses.mean() + cpo_alpha * nll_loss``."""
    need("trl")
    from trl.experimental.cpo import CPOTrainer

    h, w, bb, labels, logits = _full_logits(batch)
    logps = CPOTrainer.get_batch_logps(logits, labels, average_log_prob=loss_type in ("ipo", "simpo"))
    trainer = types.SimpleNamespace(
        beta=beta, alpha=0.0, loss_type=loss_type, simpo_gamma=simpo_gamma, label_smoothing=label_smoothing,
        accelerator=StandInAccelerator(),
    )  # fmt: skip
    losses, chosen_rewards, rejected_rewards = CPOTrainer.cpo_loss(trainer, logps[:PAIRS], logps[PAIRS:])
    nll = _chosen_nll(logits, labels)
    loss = losses.mean() + cpo_alpha * nll
    loss.backward()
    return loss.detach(), (h.grad[:, :-1], w.grad, bb.grad), (chosen_rewards, rejected_rewards, nll.detach())


def _compare_cpo(trl, ours):
    trl_loss, trl_grads, (c_rewards, r_rewards, nll) = trl
    _assert_matches_trl(ours, trl_loss, trl_grads, {4: nll, 5: c_rewards, 6: r_rewards})


@pytest.mark.parametrize("loss_type", ["sigmoid", "hinge", "ipo", "simpo"])
def test_cpo_matches_trl(loss_type):
    from liger_core.nn import LigerFusedLinearCPOLoss

    beta, smoothing, gamma, alpha = 0.4, 0.15, 0.7, 0.8
    batch = _batch(seed=40 + len(loss_type))
    trl = _trl_cpo(batch, loss_type, beta, smoothing, gamma, alpha)
    module = LigerFusedLinearCPOLoss(
        beta=beta, alpha=alpha, label_smoothing=smoothing, average_log_prob=loss_type in ("ipo", "simpo"),
        loss_type=loss_type, simpo_gamma=gamma,
    )  # fmt: skip
    _compare_cpo(trl, _ours_module(batch, module))


@pytest.mark.parametrize("compute_nll_loss", [True, False])
def test_simpo_matches_trl_cpo_simpo(compute_nll_loss):
    """SimPO is TRL's CPOTrainer with ``loss_type="simpo"`` (``cpo_alpha=0``: no NLL term)."""
    from liger_core.nn import LigerFusedLinearSimPOLoss

    beta, smoothing, gamma, alpha = 2.0, 0.1, 1.2, 0.5
    batch = _batch(seed=50 + compute_nll_loss)
    trl = _trl_cpo(batch, "simpo", beta, smoothing, gamma, alpha if compute_nll_loss else 0.0)
    module = LigerFusedLinearSimPOLoss(
        beta=beta, alpha=alpha, label_smoothing=smoothing, compute_nll_loss=compute_nll_loss, gamma=gamma
    )
    _compare_cpo(trl, _ours_module(batch, module))
