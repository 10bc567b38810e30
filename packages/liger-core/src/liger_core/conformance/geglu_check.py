"""The geglu check against the float64 oracle, without pytest: used by the conformance cases,
by vendor tests that force their own code paths, and by ``liger check``."""

from __future__ import annotations

from liger_core.conformance._glu_check import check_glu, make_glu_inputs
from liger_core.ops import geglu as contract

make_inputs = make_glu_inputs


def check_geglu(backend, a, b, dy, in_place: bool = False) -> None:
    """Run ``backend``'s geglu forward and backward; check output, grad_a and grad_b."""
    check_glu(backend, "geglu", contract.math, a, b, dy, in_place)
