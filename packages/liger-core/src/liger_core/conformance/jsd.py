"""Conformance cases for `jsd`."""

from __future__ import annotations

import pytest
import torch

from liger_core.conformance import DTYPES, require_op
from liger_core.conformance.jsd_check import check_jsd, make_inputs

SHAPES = [(1, 1), (4, 7), (9, 33), (33, 130), (3, 40000)]
_ids = lambda d: str(d).removeprefix("torch.")  # noqa: E731


@pytest.mark.parametrize("dtype", DTYPES, ids=_ids)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_jsd_shapes(conformance_backend, conformance_device, shape, dtype):
    require_op(conformance_backend, "jsd")
    s, t, lab = make_inputs(*shape, dtype, conformance_device)
    check_jsd(conformance_backend, s, t, lab)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=_ids)
@pytest.mark.parametrize("with_labels", (False, True), ids=("no-labels", "labels"))
@pytest.mark.parametrize("beta", (0.0, 0.1, 0.5, 0.9, 1.0))
def test_jsd_beta(conformance_backend, conformance_device, beta, with_labels, dtype):
    require_op(conformance_backend, "jsd")
    s, t, lab = make_inputs(17, 300, dtype, conformance_device, seed=2, with_labels=with_labels)
    check_jsd(conformance_backend, s, t, lab, beta, grad_scalar=0.75)


@pytest.mark.parametrize("beta", (0.0, 0.5, 1.0))
def test_jsd_all_ignored(conformance_backend, conformance_device, beta):
    require_op(conformance_backend, "jsd")
    s, t, lab = make_inputs(5, 40, torch.float32, conformance_device, ignored="all")
    check_jsd(conformance_backend, s, t, lab, beta)


def test_jsd_custom_ignore_index(conformance_backend, conformance_device):
    require_op(conformance_backend, "jsd")
    s, t, lab = make_inputs(12, 30, torch.float32, conformance_device, ignore_index=7, seed=5)
    check_jsd(conformance_backend, s, t, lab, 0.3, ignore_index=7)


@pytest.mark.parametrize(
    "case,error,pattern",
    [
        ("shape", ValueError, r"teacher_logp must have student_logp's shape \(4, 10\); got \(4, 9\)"),
        ("labels_shape", ValueError, r"shift_labels must have shape \(tokens,\) = \(4,\)"),
        ("beta", ValueError, r"beta must be a number in \[0, 1\]; got 1.5"),
        ("one_d", ValueError, r"student_logp must be 2-D"),
    ],
)
def test_jsd_bad_input(conformance_backend, conformance_device, case, error, pattern):
    fn = require_op(conformance_backend, "jsd")
    s, t, lab = make_inputs(4, 10, torch.float32, conformance_device)
    kw = dict(shift_labels=lab)
    if case == "shape":
        t = t[:, :9]
    elif case == "labels_shape":
        kw["shift_labels"] = lab[:3]
    elif case == "beta":
        kw["beta"] = 1.5
    elif case == "one_d":
        s, t, kw["shift_labels"] = s[0], t[0], None
    with pytest.raises(error, match=pattern):
        fn(s, t, **kw)
