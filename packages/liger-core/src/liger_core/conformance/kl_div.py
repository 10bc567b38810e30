"""Conformance cases for `kl_div`."""

from __future__ import annotations

import pytest
import torch

from liger_core.conformance import DTYPES, require_op
from liger_core.conformance.kl_div_check import check_kl_div, make_inputs

SHAPES = [(1, 1), (4, 7), (9, 33), (33, 130), (3, 40000), (0, 16)]
REDUCTIONS = ("batchmean", "sum", "mean", "none")
_ids = lambda d: str(d).removeprefix("torch.")  # noqa: E731


@pytest.mark.parametrize("dtype", DTYPES, ids=_ids)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_kl_div_shapes(conformance_backend, conformance_device, shape, dtype):
    require_op(conformance_backend, "kl_div")
    check_kl_div(conformance_backend, *make_inputs(*shape, dtype, conformance_device))


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=_ids)
@pytest.mark.parametrize("log_target", (False, True), ids=("prob-target", "log-target"))
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_kl_div_options(conformance_backend, conformance_device, reduction, log_target, dtype):
    require_op(conformance_backend, "kl_div")
    y_pred, y_true = make_inputs(19, 257, dtype, conformance_device, log_target=log_target, seed=2)
    check_kl_div(conformance_backend, y_pred, y_true, reduction, log_target, grad_scalar=1.5)


def test_kl_div_eps_and_mixed_dtypes(conformance_backend, conformance_device):
    require_op(conformance_backend, "kl_div")
    y_pred, y_true = make_inputs(7, 50, torch.bfloat16, conformance_device, seed=4, true_dtype=torch.float32)
    check_kl_div(conformance_backend, y_pred, y_true, "sum", eps=1e-3)


@pytest.mark.parametrize(
    "case,error,pattern",
    [
        ("shape", ValueError, r"y_true must have y_pred's shape \(4, 10\); got \(4, 9\)"),
        ("one_d", ValueError, r"y_pred must be 2-D \(tokens, vocab\); got shape \(10,\)"),
        ("int", TypeError, r"y_true must have dtype float32, bfloat16, float16; got int64"),
        ("reduction", ValueError, r"reduction must be one of \('batchmean', 'sum', 'mean', 'none'\); got 'avg'"),
        ("eps", ValueError, r"eps must be a number >= 0; got -1"),
        ("log_target", TypeError, r"log_target must be True or False; got 'yes'"),
    ],
)
def test_kl_div_bad_input(conformance_backend, conformance_device, case, error, pattern):
    fn = require_op(conformance_backend, "kl_div")
    y_pred, y_true = make_inputs(4, 10, torch.float32, conformance_device)
    kw = {}
    if case == "shape":
        y_true = y_true[:, :9]
    elif case == "one_d":
        y_pred, y_true = y_pred[0], y_true[0]
    elif case == "int":
        y_true = y_true.long()
    elif case == "reduction":
        kw["reduction"] = "avg"
    elif case == "eps":
        kw["eps"] = -1
    elif case == "log_target":
        kw["log_target"] = "yes"
    with pytest.raises(error, match=pattern):
        fn(y_pred, y_true, **kw)
