"""The `fused_linear_jsd` op: its contract, argument checks and PyTorch reference."""

from __future__ import annotations

import torch

from liger_core.ops import _losses as L
from liger_core.ops import jsd as _jsd


def fused_linear_jsd(
    student_input: torch.Tensor,
    student_weight: torch.Tensor,
    teacher_input: torch.Tensor,
    teacher_weight: torch.Tensor,
    shift_labels: torch.Tensor | None = None,
    jsd_beta: float = 0.5,
    ignore_index: int = -100,
    temperature: float = 1.0,
) -> torch.Tensor:
    """The student's and teacher's lm_head projections followed by `jsd`, without
    materialising all logits (the semantics of liger-kernel 0.8.5)::

        student_logp = log_softmax(student_input @ student_weight.T / temperature)
        teacher_logp = log_softmax(teacher_input @ teacher_weight.T / temperature)
        loss = jsd(student_logp, teacher_logp, shift_labels, jsd_beta, ignore_index)

    Args:
        student_input: ``(tokens, hidden)``, float32, bfloat16 or float16.
        student_weight: ``(vocab, hidden)``, ``student_input``'s dtype.
        teacher_input: ``(tokens, teacher_hidden)`` (the hidden sizes may differ).
        teacher_weight: ``(vocab, teacher_hidden)``, ``teacher_input``'s dtype. The teacher gets
            no gradient.
        shift_labels: ``(tokens,)`` integer labels or None.
        jsd_beta: in ``[0, 1]`` (0: forward KL, 1: reverse KL).
        ignore_index: label of rows to skip.
        temperature: divides the logits; nonzero.

    Returns:
        A float32 scalar. The logits are float32 products of the inputs (no rounding to the
        input dtype before the softmax). Backward gives ``grad_student_input`` and
        ``grad_student_weight`` in their dtypes.
    """
    raise NotImplementedError("contract only: call liger_core.functional.liger_fused_linear_jsd")


def check_args(
    student_input, student_weight, teacher_input, teacher_weight, shift_labels, jsd_beta, ignore_index, temperature
) -> None:
    try:
        dev = student_input.device
        if (
            L.is_float(student_input)
            and student_input.ndim == 2
            and student_weight.dtype == student_input.dtype
            and student_weight.ndim == 2
            and student_weight.shape[1] == student_input.shape[1]
            and L.is_float(teacher_input)
            and teacher_input.ndim == 2
            and teacher_input.shape[0] == student_input.shape[0]
            and teacher_weight.dtype == teacher_input.dtype
            and teacher_weight.shape == (student_weight.shape[0], teacher_input.shape[1])
            and student_weight.device == teacher_input.device == teacher_weight.device == dev
            and (
                shift_labels is None
                or (
                    shift_labels.dtype in L.INDEX_DTYPES
                    and shift_labels.shape == student_input.shape[:1]
                    and shift_labels.device == dev
                )
            )
            and 0 <= jsd_beta <= 1
            and type(ignore_index) is int
            and temperature != 0
        ):
            return
    except (AttributeError, TypeError):
        pass
    _raise_bad_args(
        student_input, student_weight, teacher_input, teacher_weight, shift_labels, jsd_beta, ignore_index, temperature
    )


def _raise_bad_args(
    student_input, student_weight, teacher_input, teacher_weight, shift_labels, jsd_beta, ignore_index, temperature
) -> None:
    op = "fused_linear_jsd"
    L.check_matrix(op, "student_input", student_input, "(tokens, hidden)")
    L.check_matrix(op, "student_weight", student_weight, "(vocab, hidden)")
    L.check_matrix(op, "teacher_input", teacher_input, "(tokens, teacher_hidden)")
    L.check_matrix(op, "teacher_weight", teacher_weight, "(vocab, teacher_hidden)")
    L.check_same_device(
        op,
        student_input=student_input,
        student_weight=student_weight,
        teacher_input=teacher_input,
        teacher_weight=teacher_weight,
    )
    for name, w, x in (("student", student_weight, student_input), ("teacher", teacher_weight, teacher_input)):
        if w.dtype != x.dtype:
            raise TypeError(
                f"{op}: {name}_weight must have {name}_input's dtype {str(x.dtype).removeprefix('torch.')}; "
                f"got {str(w.dtype).removeprefix('torch.')}"
            )
        if w.shape[1] != x.shape[1]:
            raise ValueError(
                f"{op}: {name}_weight must have shape (vocab, {x.shape[1]}) to match {name}_input; got {tuple(w.shape)}"
            )
    if teacher_weight.shape[0] != student_weight.shape[0]:
        raise ValueError(
            f"{op}: teacher_weight must have the student's vocab {student_weight.shape[0]} rows; "
            f"got {tuple(teacher_weight.shape)}"
        )
    if teacher_input.shape[0] != student_input.shape[0]:
        raise ValueError(
            f"{op}: teacher_input must have student_input's {student_input.shape[0]} tokens; "
            f"got {tuple(teacher_input.shape)}"
        )
    if shift_labels is not None:
        L.check_labels(op, "shift_labels", shift_labels, student_input.shape[0], student_input.device)
    _jsd.check_beta(op, "jsd_beta", jsd_beta)
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"{op}: ignore_index must be an int; got {ignore_index!r}")
    if not isinstance(temperature, (int, float)) or temperature == 0:
        raise ValueError(f"{op}: temperature must be a nonzero number; got {temperature!r}")


def math(
    student_input, student_weight, teacher_input, teacher_weight, shift_labels, jsd_beta, ignore_index, temperature
) -> torch.Tensor:
    """The formula, differentiable in the student's tensors (float64 for the oracle, else float32)."""
    compute = torch.float64 if student_input.dtype == torch.float64 else torch.float32
    s = student_input.to(compute) @ student_weight.to(compute).t()
    t = teacher_input.detach().to(compute) @ teacher_weight.detach().to(compute).t()
    x = torch.log_softmax(s / temperature, dim=-1)
    y = torch.log_softmax(t / temperature, dim=-1)
    return _jsd.math(x, y, shift_labels, jsd_beta, ignore_index)


def reference(
    student_input: torch.Tensor,
    student_weight: torch.Tensor,
    teacher_input: torch.Tensor,
    teacher_weight: torch.Tensor,
    shift_labels: torch.Tensor | None = None,
    jsd_beta: float = 0.5,
    ignore_index: int = -100,
    temperature: float = 1.0,
) -> torch.Tensor:
    args = (
        student_input,
        student_weight,
        teacher_input,
        teacher_weight,
        shift_labels,
        jsd_beta,
        ignore_index,
        temperature,
    )
    check_args(*args)
    return math(*args).float()
