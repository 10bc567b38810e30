"""`fused_linear_grpo` against TRL's own GRPO loss: ``GRPOTrainer._compute_loss`` (trl 1.16) run
unbound on a stand-in trainer whose per-token log-probabilities are the policy's, computed from
the same hidden states and lm_head with torch. The loss, its gradients w.r.t. the hidden
states, lm_head and bias, and the metrics TRL logs must match the op's (float32).

Needs ``trl`` (installed by the nox hf sessions; a skip elsewhere unless ``LIGER_HF_TRAINERS=1``).
"""

from __future__ import annotations

import importlib
import os
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from liger_core import functional as F
from liger_core.nn import LigerFusedLinearGRPOLoss

B, T, H, V = 4, 9, 32, 120
TOL = {"atol": 2e-5, "rtol": 1e-4}


def _trl_trainer_class():
    if os.environ.get("LIGER_HF_TRAINERS") == "1":
        return importlib.import_module("trl.trainer.grpo_trainer").GRPOTrainer
    return pytest.importorskip("trl.trainer.grpo_trainer").GRPOTrainer


def _batch(seed: int, vllm: str | None, bias: bool):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, H, generator=g)
    w = torch.randn(V, H, generator=g) / H**0.5 * 2
    b = torch.randn(V, generator=g) * 0.3 if bias else None
    ids = torch.randint(0, V, (B, T), generator=g)
    lengths = torch.tensor([T, 5, 0, 7])  # one empty completion
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    adv = torch.randn(B, generator=g)
    with torch.no_grad():
        logits = x @ w.t() + (0 if b is None else b)
        logp = torch.log_softmax(logits, -1).gather(-1, ids[..., None]).squeeze(-1)
    old = logp + 0.25 * torch.randn(B, T, generator=g)
    ref = logp + 0.25 * torch.randn(B, T, generator=g)
    ratio = None
    if vllm == "token":
        ratio = torch.exp(0.2 * torch.randn(B, T, generator=g))
    elif vllm == "sequence":
        ratio = torch.exp(0.2 * torch.randn(B, 1, generator=g))
    return x, w, b, ids, mask, adv, old, ref, ratio


class _StandIn:
    """What ``GRPOTrainer._compute_loss`` reads from ``self``, on one process, one accumulation step."""

    def __init__(self, trainer_cls, cfg: dict, logps_fn):
        self.loss_type = cfg["loss_type"]
        self.beta = cfg["beta"]
        self.epsilon_low = cfg["epsilon_low"]
        self.epsilon_high = cfg["epsilon_high"]
        self.importance_sampling_level = cfg["importance_sampling_level"]
        self.max_completion_length = cfg["max_completion_length"]
        self.top_entropy_quantile = 1.0
        self.off_policy_mask_threshold = None
        self.use_vllm = cfg["vllm"] is not None
        self.vllm_importance_sampling_correction = True
        self.aux_loss_enabled = False
        self._entropy_bonus_enabled = False
        self.current_gradient_accumulation_steps = 1
        self.model = SimpleNamespace(training=True)
        self.accelerator = SimpleNamespace(
            num_processes=1, gather=lambda t: t, gather_for_metrics=lambda t: t, reduce=lambda t, reduction: t
        )
        self.args = SimpleNamespace(
            delta=cfg["delta"],
            use_bias_correction_kl=cfg["use_bias_correction_kl"],
            sapo_temperature_pos=cfg["sapo_temperature_pos"],
            sapo_temperature_neg=cfg["sapo_temperature_neg"],
            vespo_k_pos=cfg["vespo_k_pos"],
            vespo_lambda_pos=cfg["vespo_lambda_pos"],
            vespo_k_neg=cfg["vespo_k_neg"],
            vespo_lambda_neg=cfg["vespo_lambda_neg"],
            steps_per_generation=1,
        )
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
        self.get_gamma_weights = trainer_cls.get_gamma_weights
        self._logps_fn = logps_fn

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, **kw):
        return self._logps_fn()


DEFAULTS = dict(
    beta=0.04,
    epsilon_low=0.2,
    epsilon_high=0.2,
    importance_sampling_level="token",
    max_completion_length=None,
    delta=None,
    use_bias_correction_kl=False,
    sapo_temperature_pos=1.0,
    sapo_temperature_neg=1.05,
    vespo_k_pos=2.0,
    vespo_lambda_pos=3.0,
    vespo_k_neg=3.0,
    vespo_lambda_neg=2.0,
    vllm=None,
    bias=False,
    old=True,
)

CASES = {
    "grpo": dict(loss_type="grpo"),
    "grpo_sequence_bias_corrected_kl": dict(
        loss_type="grpo", importance_sampling_level="sequence", use_bias_correction_kl=True
    ),
    "bnpo_delta": dict(loss_type="bnpo", delta=1.25, bias=True),
    "dr_grpo": dict(loss_type="dr_grpo", max_completion_length=12),
    "dapo": dict(loss_type="dapo", epsilon_high=0.28),
    "dapo_vllm_token_no_kl": dict(loss_type="dapo", vllm="token", beta=0.0),
    "dapo_on_policy": dict(loss_type="dapo", old=False),
    "cispo_vllm_sequence": dict(loss_type="cispo", epsilon_high=1.1, vllm="sequence"),
    "sapo": dict(loss_type="sapo", sapo_temperature_pos=1.5, sapo_temperature_neg=0.8),
    "luspo_sequence": dict(loss_type="luspo", importance_sampling_level="sequence"),
    "luspo_token": dict(loss_type="luspo"),
    "vespo_vllm_token": dict(loss_type="vespo", vllm="token", vespo_k_neg=2.5),
}


def _trl_loss(trainer_cls, cfg, token_logits, ids, mask, adv, ref, old, ratio):
    """TRL's ``_compute_loss`` on a stand-in trainer whose policy gives the log-probabilities of
    ``token_logits()`` (called when TRL asks, so its graph reaches their leaves): the loss (after
    its backward) and the metrics TRL logged."""

    def logps():
        logp_all = torch.log_softmax(token_logits(), -1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp_all.gather(-1, ids[..., None]).squeeze(-1), entropy.detach(), None

    stand_in = _StandIn(trainer_cls, cfg, logps)
    inputs = {
        "prompt_ids": torch.zeros(B, 0, dtype=torch.long),
        "prompt_mask": torch.zeros(B, 0, dtype=torch.long),
        "completion_ids": ids,
        "completion_mask": mask,
        "advantages": adv,
        "num_items_in_batch": mask.sum(),
        "ref_per_token_logps": ref,
    }
    if old is not None:
        inputs["old_per_token_logps"] = old
    if ratio is not None:
        inputs["importance_sampling_ratio"] = ratio
    trl_loss = trainer_cls._compute_loss(stand_in, None, inputs)
    trl_loss.backward()
    return trl_loss.detach(), {k: v[-1] for k, v in stand_in._metrics["train"].items()}


@pytest.mark.parametrize("case", list(CASES))
def test_grpo_matches_trl(case):
    trainer_cls = _trl_trainer_class()
    cfg = {**DEFAULTS, **CASES[case]}
    x, w, b, ids, mask, adv, old, ref, ratio = _batch(7, cfg["vllm"], cfg["bias"])
    if not cfg["old"]:
        old = None

    # TRL: its loss on the policy's per-token log-probabilities, differentiated back to x, w, b.
    xt, wt = x.clone().requires_grad_(), w.clone().requires_grad_()
    bt = None if b is None else b.clone().requires_grad_()

    trl_loss, logged = _trl_loss(
        trainer_cls, cfg, lambda: xt @ wt.t() + (0 if bt is None else bt), ids, mask, adv, ref, old, ratio
    )

    # Ours, through the functional API (the backend serving the CPU: the reference, or
    # liger-ops-cuda's kernels in the Triton interpreter under LIGER_BACKEND=cuda).
    xo, wo = x.clone().requires_grad_(), w.clone().requires_grad_()
    bo = None if b is None else b.clone().requires_grad_()
    keys = ("beta", "epsilon_low", "epsilon_high")
    loss, metrics = F.liger_fused_linear_grpo(
        xo, wo, ids, mask, adv, bo, ref, old, ratio, float(mask.sum()),
        **{k: cfg[k] for k in keys}, loss_type=cfg["loss_type"], max_completion_length=cfg["max_completion_length"],
        importance_sampling_level=cfg["importance_sampling_level"], sapo_temperature_pos=cfg["sapo_temperature_pos"],
        sapo_temperature_neg=cfg["sapo_temperature_neg"], delta=cfg["delta"],
        use_bias_correction_kl=cfg["use_bias_correction_kl"], vespo_k_pos=cfg["vespo_k_pos"],
        vespo_lambda_pos=cfg["vespo_lambda_pos"], vespo_k_neg=cfg["vespo_k_neg"],
        vespo_lambda_neg=cfg["vespo_lambda_neg"],
    )  # fmt: skip
    loss.backward()

    torch.testing.assert_close(loss, trl_loss, **TOL)
    torch.testing.assert_close(xo.grad, xt.grad, **TOL)
    torch.testing.assert_close(wo.grad, wt.grad, **TOL)
    if b is not None:
        torch.testing.assert_close(bo.grad, bt.grad, **TOL)
    ours = dict(zip(("kl", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"), metrics.tolist()))
    ours["cispo_clip_ratio"] = ours["clip_ratio/high_mean"]
    ours["vespo/phi_seq_mean"] = float(metrics[4])
    compared = [k for k in logged if k in ours]
    assert ("kl" in compared) == (cfg["beta"] != 0)
    assert compared, f"TRL logged none of the op's metrics: {sorted(logged)}"
    for key in compared:
        assert ours[key] == pytest.approx(logged[key], abs=1e-5), key
    if cfg["loss_type"] in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo"):
        assert {"clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"} <= set(compared)


def test_module_returns_liger_kernels_layout():
    """``LigerFusedLinearGRPOLoss`` returns (loss, [kl, clip_ratio]) as liger-kernel's, from the op."""
    x, w, _, ids, mask, adv, old, ref, _ = _batch(3, None, False)
    module = LigerFusedLinearGRPOLoss(beta=0.1, loss_type="bnpo")
    loss, logged = module(x, w, ids, mask, adv, ref_per_token_logps=ref, old_per_token_logps=old)
    want, metrics = F.liger_fused_linear_grpo(x, w, ids, mask, adv, None, ref, old, beta=0.1, loss_type="bnpo")
    torch.testing.assert_close(loss, want)
    assert len(logged) == 2
    torch.testing.assert_close(logged[0], metrics[0])
    torch.testing.assert_close(logged[1], metrics[3])
    with pytest.raises(ValueError, match="ref_input/ref_weight/ref_bias are not supported"):
        module(x, w, ids, mask, adv, ref_input=x, ref_weight=w)
    with pytest.raises(ValueError, match="loss_type must be one of"):
        LigerFusedLinearGRPOLoss(loss_type="ppo")


@pytest.mark.parametrize(
    "case",
    [
        "grpo_sequence_bias_corrected_kl",
        "bnpo_delta",
        "dapo_vllm_token_no_kl",
        "cispo_vllm_sequence",
        "sapo",
        "luspo_token",
        "vespo_vllm_token",
    ],
)
def test_grpo_loss_from_logits_matches_trl(case):
    """`grpo_loss` (liger-kernel's ``triton_grpo_loss``, reduce=True) against TRL on the same logits."""
    trainer_cls = _trl_trainer_class()
    cfg = {**DEFAULTS, **CASES[case]}
    _, _, _, ids, mask, adv, old, ref, ratio = _batch(11, cfg["vllm"], False)
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(B, T + 1, V, generator=g) * 2
    temperature = 0.9
    # Old and reference log-probabilities near these logits' own (some ratios outside the clip range).
    with torch.no_grad():
        own = torch.log_softmax(logits[:, :-1] / temperature, -1).gather(-1, ids[..., None]).squeeze(-1)
    old, ref = own + 0.25 * torch.randn(B, T, generator=g), own + 0.25 * torch.randn(B, T, generator=g)
    lt = logits.clone().requires_grad_()

    trl_loss, logged = _trl_loss(trainer_cls, cfg, lambda: lt[:, :-1] / temperature, ids, mask, adv, ref, old, ratio)

    lo = logits.clone().requires_grad_()
    loss, kl, clip_ratio = F.liger_grpo_loss(
        lo, old, ref, ids, adv, mask, temperature, cfg["beta"], cfg["epsilon_low"], cfg["epsilon_high"],
        loss_type=cfg["loss_type"], max_completion_length=cfg["max_completion_length"],
        importance_sampling_level=cfg["importance_sampling_level"], reduce=True,
        sapo_temperature_pos=cfg["sapo_temperature_pos"], sapo_temperature_neg=cfg["sapo_temperature_neg"],
        vllm_is_ratio=ratio, delta=cfg["delta"], use_bias_correction_kl=cfg["use_bias_correction_kl"],
        num_items_in_batch=float(mask.sum()), vespo_k_pos=cfg["vespo_k_pos"], vespo_lambda_pos=cfg["vespo_lambda_pos"],
        vespo_k_neg=cfg["vespo_k_neg"], vespo_lambda_neg=cfg["vespo_lambda_neg"],
    )  # fmt: skip
    loss.backward()
    torch.testing.assert_close(loss, trl_loss, **TOL)
    torch.testing.assert_close(lo.grad, lt.grad, **TOL)
    assert float(lo.grad[:, -1].abs().max()) == 0.0
    if cfg["beta"] != 0:
        assert float(kl) == pytest.approx(logged["kl"], rel=1e-5, abs=1e-6)
    region = logged.get("clip_ratio/region_mean", logged.get("cispo_clip_ratio"))
    if region is not None:
        assert float(clip_ratio) == pytest.approx(region, abs=1e-5)
