"""Loss modules with liger-kernel's names and constructor arguments."""

from __future__ import annotations

import torch
from torch import nn

from liger_core.functional import (
    liger_cross_entropy,
    liger_fused_ce_tvd,
    liger_fused_linear_cpo,
    liger_fused_linear_cross_entropy,
    liger_fused_linear_dpo,
    liger_fused_linear_jsd,
    liger_fused_linear_orpo,
    liger_fused_linear_simpo,
    liger_jsd,
    liger_kl_div,
    liger_tvd,
    liger_vocab_parallel_cross_entropy,
)
from liger_core.memory_budget import module_memory_budget
from liger_core.ops import _losses as L
from liger_core.ops.fused_linear_cross_entropy import ACCUM_DTYPES


class _CrossEntropyOptions(nn.Module):
    """The cross-entropy options the CE modules share (liger-kernel's names), checked once."""

    def __init__(self, ignore_index, lse_square_scale, label_smoothing, reduction, softcap, return_z_loss) -> None:
        super().__init__()
        try:
            L.check_ce_options(
                type(self).__name__, ignore_index, lse_square_scale, label_smoothing, reduction, softcap, return_z_loss
            )
        except (TypeError, ValueError) as e:
            raise type(e)(str(e)) from None
        self.ignore_index = ignore_index
        self.lse_square_scale = lse_square_scale
        self.label_smoothing = label_smoothing
        self.reduction = reduction
        self.softcap = softcap
        self.return_z_loss = return_z_loss

    def ce_options(self) -> tuple:
        """The options in the ops' argument order (after the class weights)."""
        return (
            self.ignore_index,
            self.lse_square_scale,
            self.label_smoothing,
            self.reduction,
            self.softcap,
            self.return_z_loss,
        )

    def extra_repr(self) -> str:
        return (
            f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, label_smoothing={self.label_smoothing}, "
            f"lse_square_scale={self.lse_square_scale}, softcap={self.softcap}"
        )


class LigerCrossEntropyLoss(_CrossEntropyOptions):
    """Cross-entropy over ``(tokens, vocab)`` logits, a drop-in for ``torch.nn.CrossEntropyLoss``
    plus z-loss (``lse_square_scale``) and Gemma-2 softcapping. ``forward(logits, target)`` gives
    the loss, or ``(loss, z_loss)`` with ``return_z_loss``. The logits are never modified unless
    ``in_place=True`` (opt-in, liger-kernel's behaviour): then their memory may receive the
    gradient, saving a logits-sized buffer, and the caller must not read them after the forward."""

    def __init__(
        self,
        weight: torch.Tensor | None = None,
        ignore_index: int = -100,
        lse_square_scale: float = 0.0,
        label_smoothing: float = 0.0,
        reduction: str = "mean",
        softcap: float | None = None,
        return_z_loss: bool = False,
        in_place: bool = False,
    ) -> None:
        super().__init__(ignore_index, lse_square_scale, label_smoothing, reduction, softcap, return_z_loss)
        if type(in_place) is not bool:
            raise TypeError(f"LigerCrossEntropyLoss: in_place must be True or False; got {in_place!r}")
        self.weight = weight
        self.in_place = in_place

    def forward(self, _input: torch.Tensor, target: torch.Tensor):
        return liger_cross_entropy(_input, target, self.weight, *self.ce_options(), self.in_place)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, in_place={self.in_place}"


class LigerVocabParallelCrossEntropy(nn.Module):
    """Cross-entropy over vocabulary-sharded logits (tensor parallelism), under liger-kernel
    0.8.5's name and ``forward(vocab_parallel_logits, target, tp_group=None)``.

    ``vocab_parallel_logits``: ``(..., V_local)``, this rank's contiguous shard of the vocabulary
    (rank ``r`` of ``tp_group`` holds ``[r * V_local, (r + 1) * V_local)``); ``target``: the
    matching ``(...)`` global class indices, the same on every rank. ``reduction="none"`` (the
    default, as liger-kernel's, whose only choice it is) gives the per-token loss in the targets'
    shape; ``"mean"`` and ``"sum"`` reduce over the non-ignored tokens of every rank's batch. Label
    smoothing is not offered. The logits are never modified unless ``in_place=True``.
    """

    def __init__(self, ignore_index: int = -100, reduction: str = "none", in_place: bool = False) -> None:
        super().__init__()
        name = type(self).__name__
        if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
            raise TypeError(f"{name}: ignore_index must be an int; got {ignore_index!r}")
        L.check_reduction(name, reduction, L.CE_REDUCTIONS)
        if type(in_place) is not bool:
            raise TypeError(f"{name}: in_place must be True or False; got {in_place!r}")
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.in_place = in_place

    def forward(
        self,
        vocab_parallel_logits: torch.Tensor,
        target: torch.Tensor,
        tp_group: torch.distributed.ProcessGroup | None = None,
    ) -> torch.Tensor:
        # Any leading shape (liger-kernel takes (seq, batch, V_local)): flattened to the op's rows.
        logits = vocab_parallel_logits
        if isinstance(logits, torch.Tensor) and logits.dim() >= 2:
            logits = logits.reshape(-1, logits.shape[-1])
        flat_target = target.reshape(-1) if isinstance(target, torch.Tensor) else target
        loss = liger_vocab_parallel_cross_entropy(
            logits, flat_target, tp_group, self.ignore_index, self.reduction, self.in_place
        )
        return loss.reshape(target.shape) if self.reduction == "none" else loss

    def extra_repr(self) -> str:
        return f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, in_place={self.in_place}"


class LigerFusedLinearCrossEntropyLoss(_CrossEntropyOptions):
    """lm_head projection + cross-entropy without materialising the logits.
    ``forward(lin_weight, _input, target, bias=None)`` (liger-kernel's argument order)."""

    def __init__(
        self,
        ce_weight: torch.Tensor | None = None,
        ignore_index: int = -100,
        lse_square_scale: float = 0.0,
        label_smoothing: float = 0.0,
        reduction: str = "mean",
        softcap: float | None = None,
        return_z_loss: bool = False,
        accum_dtype: torch.dtype | None = None,
        memory_budget: int | str | None = None,
    ) -> None:
        super().__init__(ignore_index, lse_square_scale, label_smoothing, reduction, softcap, return_z_loss)
        if accum_dtype not in ACCUM_DTYPES:
            raise ValueError(
                f"LigerFusedLinearCrossEntropyLoss: accum_dtype must be None, torch.float32, torch.bfloat16 or "
                f"torch.float16; got {accum_dtype!r}"
            )
        self.ce_weight = ce_weight
        self.accum_dtype = accum_dtype
        self.memory_budget = module_memory_budget("LigerFusedLinearCrossEntropyLoss", memory_budget)

    def forward(self, lin_weight: torch.Tensor, _input: torch.Tensor, target: torch.Tensor, bias=None):
        return liger_fused_linear_cross_entropy(
            _input,
            lin_weight,
            target,
            bias,
            self.ce_weight,
            *self.ce_options(),
            self.accum_dtype,
            memory_budget=self.memory_budget,
        )


class LigerKLDIVLoss(nn.KLDivLoss):
    """``torch.nn.KLDivLoss`` (``reduction``, ``log_target``) with an ``eps`` floor inside the log."""

    def __init__(self, eps: float = 1e-10, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        L.check_reduction("LigerKLDIVLoss", self.reduction, L.DIV_REDUCTIONS)
        self.eps = eps

    def forward(self, y_pred: torch.Tensor, y_true: torch.Tensor) -> torch.Tensor:
        return liger_kl_div(y_pred, y_true, self.reduction, self.log_target, self.eps)


class LigerJSD(nn.Module):
    """Generalised JSD; ``forward(log_q, log_p, shift_labels=None)`` with the student's
    log-probabilities first."""

    def __init__(self, beta: float = 0.5, ignore_index: int = -100) -> None:
        super().__init__()
        from liger_core.ops.jsd import check_beta

        check_beta("LigerJSD", "beta", beta)
        self.beta = beta
        self.ignore_index = ignore_index

    def forward(self, log_q: torch.Tensor, log_p: torch.Tensor, shift_labels: torch.Tensor | None = None):
        return liger_jsd(log_q, log_p, shift_labels, self.beta, self.ignore_index)


class LigerFusedLinearJSD(nn.Module):
    """Student and teacher lm_heads + JSD without materialising the logits.
    ``forward(student_input, student_weight, teacher_input, teacher_weight, shift_labels=None)``."""

    def __init__(
        self,
        jsd_beta: float = 0.5,
        ignore_index: int = -100,
        temperature: float = 1.0,
        memory_budget: int | str | None = None,
    ) -> None:
        super().__init__()
        from liger_core.ops.jsd import check_beta

        self.memory_budget = module_memory_budget("LigerFusedLinearJSD", memory_budget)

        check_beta("LigerFusedLinearJSD", "jsd_beta", jsd_beta)
        if temperature == 0:
            raise ValueError("LigerFusedLinearJSD: temperature must be a nonzero number; got 0")
        self.jsd_beta = jsd_beta
        self.ignore_index = ignore_index
        self.temperature = temperature

    def forward(
        self,
        student_input: torch.Tensor,
        student_weight: torch.Tensor,
        teacher_input: torch.Tensor,
        teacher_weight: torch.Tensor,
        shift_labels: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return liger_fused_linear_jsd(
            student_input,
            student_weight,
            teacher_input,
            teacher_weight,
            shift_labels,
            self.jsd_beta,
            self.ignore_index,
            self.temperature,
            memory_budget=self.memory_budget,
        )


class LigerTVDLoss(nn.Module):
    """Total variation distance; ``forward(p, q, shift_labels=None)``."""

    def __init__(self, reduction: str = "batchmean", ignore_index: int = -100) -> None:
        super().__init__()
        L.check_reduction("LigerTVDLoss", reduction, L.DIV_REDUCTIONS)
        self.reduction = reduction
        self.ignore_index = ignore_index

    def forward(self, p: torch.Tensor, q: torch.Tensor, shift_labels: torch.Tensor | None = None) -> torch.Tensor:
        return liger_tvd(p, q, shift_labels, self.reduction, self.ignore_index)


class LigerFusedLinearDPOLoss(nn.Module):
    """lm_head projection + DPO loss without materialising the logits, under liger-kernel 0.8.5's
    name, constructor and ``forward(lin_weight, _input, target, bias=None, ref_input=None,
    ref_weight=None, ref_bias=None)``; returns liger-kernel's ``(loss, (chosen_logps,
    rejected_logps, chosen_logits_mean, rejected_logits_mean, nll_loss, chosen_rewards,
    rejected_rewards))`` (the metrics as TRL's DPOTrainer logs them: see
    `liger_core.ops.fused_linear_dpo`). ``compiled`` and ``chunk_size`` are accepted for
    compatibility and change nothing: the backend sizes its chunks of pairs and needs no
    torch.compile."""

    def __init__(
        self,
        ignore_index: int = -100,
        beta: float = 0.1,
        alpha: float = 1.0,
        compute_nll_loss: bool = False,
        compiled: bool = True,
        use_ref_model: bool = True,
        average_log_prob: bool = False,
        chunk_size: int = 1,
        loss_type: str = "sigmoid",
        label_smoothing: float = 0.0,
        discopop_tau: float = 0.05,
        memory_budget: int | str | None = None,
    ) -> None:
        super().__init__()
        self.memory_budget = module_memory_budget(type(self).__name__, memory_budget)
        from liger_core.ops import _preference as P
        from liger_core.ops import fused_linear_dpo as dpo

        name = type(self).__name__
        options = (ignore_index, beta, compute_nll_loss, average_log_prob, loss_type, label_smoothing, discopop_tau)
        dpo.check_options(name, *options, alpha)
        P.check_flag(name, "use_ref_model", use_ref_model)
        self.ignore_index = ignore_index
        self.beta = beta
        self.alpha = alpha
        self.compute_nll_loss = compute_nll_loss
        self.compiled = compiled
        self.use_ref_model = use_ref_model
        self.average_log_prob = average_log_prob
        self.chunk_size = chunk_size
        self.loss_type = loss_type
        self.label_smoothing = label_smoothing
        self.discopop_tau = discopop_tau

    def forward(
        self,
        lin_weight: torch.Tensor,
        _input: torch.Tensor,
        target: torch.Tensor,
        bias: torch.Tensor | None = None,
        ref_input: torch.Tensor | None = None,
        ref_weight: torch.Tensor | None = None,
        ref_bias: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        loss, *metrics = liger_fused_linear_dpo(
            _input, lin_weight, target, bias, ref_input, ref_weight, ref_bias, self.ignore_index, self.beta,
            self.compute_nll_loss, self.use_ref_model, self.average_log_prob, self.loss_type,
            self.label_smoothing, self.discopop_tau, self.alpha,
            memory_budget=self.memory_budget,
        )  # fmt: skip
        return loss, tuple(metrics)

    def extra_repr(self) -> str:
        return (
            f"loss_type={self.loss_type!r}, beta={self.beta}, use_ref_model={self.use_ref_model}, "
            f"compute_nll_loss={self.compute_nll_loss}, alpha={self.alpha}, average_log_prob={self.average_log_prob}"
        )


class LigerFusedLinearORPOLoss(nn.Module):
    """lm_head projection + ORPO loss without materialising the logits, under liger-kernel 0.8.5's
    name, constructor and ``forward(lin_weight, _input, target, bias=None)``; returns
    liger-kernel's ``(loss, (chosen_logps, rejected_logps, chosen_logits_mean,
    rejected_logits_mean, nll_loss, chosen_rewards, rejected_rewards, log_odds_ratio,
    log_odds_chosen))`` (see `liger_core.ops.fused_linear_orpo`). liger-kernel's ``nll_target``
    (a separate NLL target) is not offered; ``compiled`` and ``chunk_size`` change nothing."""

    def __init__(
        self,
        ignore_index: int = -100,
        beta: float = 0.1,
        compute_nll_loss: bool = True,
        compiled: bool = True,
        chunk_size: int = 1,
        memory_budget: int | str | None = None,
    ) -> None:
        super().__init__()
        self.memory_budget = module_memory_budget(type(self).__name__, memory_budget)
        from liger_core.ops import fused_linear_orpo as orpo

        orpo.check_options(type(self).__name__, ignore_index, beta, compute_nll_loss)
        self.ignore_index = ignore_index
        self.beta = beta
        self.compute_nll_loss = compute_nll_loss
        self.compiled = compiled
        self.chunk_size = chunk_size

    def forward(
        self,
        lin_weight: torch.Tensor,
        _input: torch.Tensor,
        target: torch.Tensor,
        bias: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        from liger_core.ops.fused_linear_orpo import log_odds

        loss, *metrics = liger_fused_linear_orpo(
            _input,
            lin_weight,
            target,
            bias,
            self.ignore_index,
            self.beta,
            self.compute_nll_loss,
            memory_budget=self.memory_budget,
        )
        odds = log_odds(metrics[0], metrics[1])
        return loss, (*metrics, torch.nn.functional.logsigmoid(odds).mean(), odds.mean())

    def extra_repr(self) -> str:
        return f"beta={self.beta}, compute_nll_loss={self.compute_nll_loss}, ignore_index={self.ignore_index}"


class LigerFusedLinearCPOLoss(nn.Module):
    """lm_head projection + CPO loss without materialising the logits, under liger-kernel 0.8.5's
    name, constructor (plus TRL's ``loss_type`` and ``simpo_gamma`` at the end) and
    ``forward(lin_weight, _input, target, bias=None)``; returns liger-kernel's ``(loss,
    (chosen_logps, rejected_logps, chosen_logits_mean, rejected_logits_mean, nll_loss,
    chosen_rewards, rejected_rewards))`` (see `liger_core.ops.fused_linear_cpo`). ``compiled``
    and ``chunk_size`` change nothing."""

    def __init__(
        self,
        ignore_index: int = -100,
        beta: float = 0.1,
        alpha: float = 1.0,
        label_smoothing: float = 0.0,
        compute_nll_loss: bool = True,
        compiled: bool = True,
        average_log_prob: bool = False,
        chunk_size: int = 1,
        loss_type: str = "sigmoid",
        simpo_gamma: float = 0.5,
        memory_budget: int | str | None = None,
    ) -> None:
        super().__init__()
        self.memory_budget = module_memory_budget(type(self).__name__, memory_budget)
        from liger_core.ops import _preference as P
        from liger_core.ops import fused_linear_cpo as cpo

        name = type(self).__name__
        cpo.check_options(name, ignore_index, beta, alpha, label_smoothing, compute_nll_loss, average_log_prob)
        P.check_choice(name, "loss_type", loss_type, cpo.LOSS_TYPES)
        P.check_number(name, "simpo_gamma", simpo_gamma)
        self.ignore_index = ignore_index
        self.beta = beta
        self.alpha = alpha
        self.label_smoothing = label_smoothing
        self.compute_nll_loss = compute_nll_loss
        self.compiled = compiled
        self.average_log_prob = average_log_prob
        self.chunk_size = chunk_size
        self.loss_type = loss_type
        self.simpo_gamma = simpo_gamma

    def forward(
        self,
        lin_weight: torch.Tensor,
        _input: torch.Tensor,
        target: torch.Tensor,
        bias: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        loss, *metrics = liger_fused_linear_cpo(
            _input, lin_weight, target, bias, self.ignore_index, self.beta, self.alpha, self.label_smoothing,
            self.compute_nll_loss, self.average_log_prob, self.loss_type, self.simpo_gamma,
            memory_budget=self.memory_budget,
        )  # fmt: skip
        return loss, tuple(metrics)

    def extra_repr(self) -> str:
        return f"loss_type={self.loss_type!r}, beta={self.beta}, alpha={self.alpha}"


class LigerFusedLinearSimPOLoss(nn.Module):
    """lm_head projection + SimPO loss without materialising the logits, under liger-kernel
    0.8.5's name, constructor and ``forward(lin_weight, _input, target, bias=None)``; returns
    liger-kernel's ``(loss, (chosen_logps, rejected_logps, chosen_logits_mean,
    rejected_logits_mean, nll_loss, chosen_rewards, rejected_rewards))`` (see
    `liger_core.ops.fused_linear_simpo`). ``compiled`` and ``chunk_size`` change nothing."""

    def __init__(
        self,
        ignore_index: int = -100,
        beta: float = 0.1,
        alpha: float = 1.0,
        label_smoothing: float = 0.0,
        compute_nll_loss: bool = True,
        compiled: bool = True,
        gamma: float = 0.5,
        chunk_size: int = 1,
        memory_budget: int | str | None = None,
    ) -> None:
        super().__init__()
        self.memory_budget = module_memory_budget(type(self).__name__, memory_budget)
        from liger_core.ops import _preference as P
        from liger_core.ops import fused_linear_cpo as cpo

        name = type(self).__name__
        cpo.check_options(name, ignore_index, beta, alpha, label_smoothing, compute_nll_loss, True)
        P.check_number(name, "gamma", gamma)
        self.ignore_index = ignore_index
        self.beta = beta
        self.alpha = alpha
        self.label_smoothing = label_smoothing
        self.compute_nll_loss = compute_nll_loss
        self.compiled = compiled
        self.gamma = gamma
        self.chunk_size = chunk_size

    def forward(
        self,
        lin_weight: torch.Tensor,
        _input: torch.Tensor,
        target: torch.Tensor,
        bias: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        loss, *metrics = liger_fused_linear_simpo(
            _input, lin_weight, target, bias, self.ignore_index, self.beta, self.alpha, self.label_smoothing,
            self.compute_nll_loss, self.gamma,
            memory_budget=self.memory_budget,
        )  # fmt: skip
        return loss, tuple(metrics)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, gamma={self.gamma}, alpha={self.alpha}"


class LigerFusedCETVDLoss(nn.Module):
    """Per-token cross-entropy and total variation distance against a teacher, unreduced;
    ``forward(student_logits, teacher_logits, target) -> (ce, tvd)``."""

    def __init__(self, ignore_index: int = -100) -> None:
        super().__init__()
        self.ignore_index = ignore_index

    def forward(
        self, student_logits: torch.Tensor, teacher_logits: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return liger_fused_ce_tvd(student_logits, teacher_logits, target, self.ignore_index)
