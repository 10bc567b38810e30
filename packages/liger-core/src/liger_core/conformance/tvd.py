"""Conformance cases for `tvd`."""

from __future__ import annotations

import pytest
import torch

from liger_core.conformance import DTYPES, require_op
from liger_core.conformance.tvd_check import check_tvd, make_inputs

SHAPES = [(1, 1), (4, 7), (9, 33), (33, 130), (3, 40000)]
REDUCTIONS = ("batchmean", "sum", "mean", "none")
_ids = lambda d: str(d).removeprefix("torch.")  # noqa: E731


@pytest.mark.parametrize("dtype", DTYPES, ids=_ids)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_tvd_shapes(conformance_backend, conformance_device, shape, dtype):
    require_op(conformance_backend, "tvd")
    p, q, lab = make_inputs(*shape, dtype, conformance_device)
    check_tvd(conformance_backend, p, q, lab)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=_ids)
@pytest.mark.parametrize("with_labels", (False, True), ids=("no-labels", "labels"))
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_tvd_options(conformance_backend, conformance_device, reduction, with_labels, dtype):
    require_op(conformance_backend, "tvd")
    p, q, lab = make_inputs(21, 300, dtype, conformance_device, seed=3, with_labels=with_labels)
    check_tvd(conformance_backend, p, q, lab, reduction, grad_scalar=2.0)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_tvd_all_ignored(conformance_backend, conformance_device, reduction):
    require_op(conformance_backend, "tvd")
    p, q, lab = make_inputs(5, 40, torch.float32, conformance_device, ignored="all")
    check_tvd(conformance_backend, p, q, lab, reduction)


def test_tvd_custom_ignore_index(conformance_backend, conformance_device):
    require_op(conformance_backend, "tvd")
    p, q, lab = make_inputs(12, 30, torch.float32, conformance_device, ignore_index=3, seed=5)
    check_tvd(conformance_backend, p, q, lab, "mean", ignore_index=3)


@pytest.mark.parametrize(
    "case,error,pattern",
    [
        ("shape", ValueError, r"q must have p's shape \(4, 10\); got \(4, 9\)"),
        ("labels_shape", ValueError, r"shift_labels must have shape \(tokens,\) = \(4,\); got \(3,\)"),
        ("labels_float", TypeError, r"shift_labels must have an integer dtype"),
        ("reduction", ValueError, r"reduction must be one of"),
        ("p_int", TypeError, r"p must have dtype"),
    ],
)
def test_tvd_bad_input(conformance_backend, conformance_device, case, error, pattern):
    fn = require_op(conformance_backend, "tvd")
    p, q, lab = make_inputs(4, 10, torch.float32, conformance_device)
    kw = dict(shift_labels=lab)
    if case == "shape":
        q = q[:, :9]
    elif case == "labels_shape":
        kw["shift_labels"] = lab[:3]
    elif case == "labels_float":
        kw["shift_labels"] = lab.float()
    elif case == "reduction":
        kw["reduction"] = "avg"
    elif case == "p_int":
        p = p.long()
    with pytest.raises(error, match=pattern):
        fn(p, q, **kw)
