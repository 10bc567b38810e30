"""Conformance cases for `fused_linear_jsd`."""

from __future__ import annotations

import pytest
import torch

from liger_core.conformance import DTYPES, require_op
from liger_core.conformance.fused_linear_jsd_check import check_fused_linear_jsd, make_inputs

# (tokens, hidden, teacher_hidden, vocab)
SHAPES = [(1, 8, 8, 5), (7, 16, 12, 33), (5, 16, 24, 9000), (130, 8, 16, 40)]
_ids = lambda d: str(d).removeprefix("torch.")  # noqa: E731


@pytest.mark.parametrize("dtype", DTYPES, ids=_ids)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_fused_linear_jsd_shapes(conformance_backend, conformance_device, shape, dtype):
    require_op(conformance_backend, "fused_linear_jsd")
    xs, ws, xt, wt, lab = make_inputs(*shape, dtype, conformance_device)
    check_fused_linear_jsd(conformance_backend, xs, ws, xt, wt, lab)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=_ids)
@pytest.mark.parametrize("with_labels", (False, True), ids=("no-labels", "labels"))
@pytest.mark.parametrize("beta,temperature", [(0.0, 1.0), (0.5, 1.0), (1.0, 2.0), (0.2, 0.7)])
def test_fused_linear_jsd_options(conformance_backend, conformance_device, beta, temperature, with_labels, dtype):
    require_op(conformance_backend, "fused_linear_jsd")
    xs, ws, xt, wt, lab = make_inputs(37, 16, 24, 130, dtype, conformance_device, seed=3, with_labels=with_labels)
    check_fused_linear_jsd(conformance_backend, xs, ws, xt, wt, lab, beta, temperature=temperature, grad_scalar=1.5)


def test_fused_linear_jsd_all_ignored(conformance_backend, conformance_device):
    require_op(conformance_backend, "fused_linear_jsd")
    xs, ws, xt, wt, lab = make_inputs(6, 8, 8, 20, torch.float32, conformance_device, ignored="all")
    check_fused_linear_jsd(conformance_backend, xs, ws, xt, wt, lab)


@pytest.mark.parametrize(
    "case,error,pattern",
    [
        ("vocab", ValueError, r"teacher_weight must have the student's vocab 20 rows; got \(19, 12\)"),
        ("student_hidden", ValueError, r"student_weight must have shape \(vocab, 8\) to match student_input"),
        ("tokens", ValueError, r"teacher_input must have student_input's 4 tokens; got \(3, 12\)"),
        ("beta", ValueError, r"jsd_beta must be a number in \[0, 1\]; got -0.1"),
        ("temperature", ValueError, r"temperature must be a nonzero number; got 0"),
        ("dtype", TypeError, r"student_weight must have student_input's dtype float32; got bfloat16"),
    ],
)
def test_fused_linear_jsd_bad_input(conformance_backend, conformance_device, case, error, pattern):
    fn = require_op(conformance_backend, "fused_linear_jsd")
    xs, ws, xt, wt, lab = make_inputs(4, 8, 12, 20, torch.float32, conformance_device)
    kw = dict(shift_labels=lab)
    if case == "vocab":
        wt = wt[:19]
    elif case == "student_hidden":
        ws = ws[:, :7]
    elif case == "tokens":
        xt, kw["shift_labels"] = xt[:3], None
    elif case == "beta":
        kw["jsd_beta"] = -0.1
    elif case == "temperature":
        kw["temperature"] = 0
    elif case == "dtype":
        ws = ws.bfloat16()
    with pytest.raises(error, match=pattern):
        fn(xs, ws, xt, wt, **kw)
