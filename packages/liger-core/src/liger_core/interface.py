"""The op catalogue: every op of the interface, declared once.

An op's contract (signature, semantics, argument checks, reference implementation)
lives in ``liger_core/ops/<op>.py``; this module lists them with the interface version
that added each. A new op bumps the minor version; a changed signature or semantics
bumps the major version.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

from liger_core.ops import cross_entropy as _cross_entropy
from liger_core.ops import dyt as _dyt
from liger_core.ops import fused_add_rms_norm as _fused_add_rms_norm
from liger_core.ops import fused_linear_cross_entropy as _fused_linear_cross_entropy
from liger_core.ops import fused_linear_jsd as _fused_linear_jsd
from liger_core.ops import geglu as _geglu
from liger_core.ops import group_norm as _group_norm
from liger_core.ops import jsd as _jsd
from liger_core.ops import kl_div as _kl_div
from liger_core.ops import layer_norm as _layer_norm
from liger_core.ops import poly_norm as _poly_norm
from liger_core.ops import qwen2vl_mrope as _qwen2vl_mrope
from liger_core.ops import rms_norm as _rms_norm
from liger_core.ops import rope as _rope
from liger_core.ops import softmax as _softmax
from liger_core.ops import sparsemax as _sparsemax
from liger_core.ops import swiglu as _swiglu
from liger_core.ops import tvd as _tvd

INTERFACE_VERSION: tuple[int, int] = (1, 0)  # raised below to the newest op's `since`


def format_version(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def parse_version(text: str | tuple[int, int]) -> tuple[int, int]:
    """Parse ``"major.minor"``; raise ValueError naming the bad text."""
    if isinstance(text, tuple):
        return text
    try:
        major, minor = (int(p) for p in str(text).split("."))
    except ValueError:
        raise ValueError(f"interface version must look like 'MAJOR.MINOR'; got {text!r}") from None
    return major, minor


@dataclass(frozen=True)
class OpSpec:
    """One op of the interface."""

    name: str
    since: tuple[int, int]
    contract: Callable = field(repr=False)
    reference: Callable = field(repr=False)

    @property
    def signature(self) -> inspect.Signature:
        return inspect.signature(self.contract)

    @property
    def doc(self) -> str:
        return inspect.getdoc(self.contract) or ""


CATALOGUE: dict[str, OpSpec] = {
    spec.name: spec
    for spec in (
        OpSpec("rms_norm", (1, 0), _rms_norm.rms_norm, _rms_norm.reference),
        # 1.1: the norm family.
        OpSpec("fused_add_rms_norm", (1, 1), _fused_add_rms_norm.fused_add_rms_norm, _fused_add_rms_norm.reference),
        OpSpec("layer_norm", (1, 1), _layer_norm.layer_norm, _layer_norm.reference),
        OpSpec("group_norm", (1, 1), _group_norm.group_norm, _group_norm.reference),
        OpSpec("poly_norm", (1, 1), _poly_norm.poly_norm, _poly_norm.reference),
        OpSpec("dyt", (1, 1), _dyt.dyt, _dyt.reference),
        # 1.2: activations, rotary embeddings, softmax.
        OpSpec("swiglu", (1, 2), _swiglu.swiglu, _swiglu.reference),
        OpSpec("geglu", (1, 2), _geglu.geglu, _geglu.reference),
        OpSpec("rope", (1, 2), _rope.rope, _rope.reference),
        OpSpec("qwen2vl_mrope", (1, 2), _qwen2vl_mrope.qwen2vl_mrope, _qwen2vl_mrope.reference),
        OpSpec("softmax", (1, 2), _softmax.softmax, _softmax.reference),
        OpSpec("sparsemax", (1, 2), _sparsemax.sparsemax, _sparsemax.reference),
        # 1.3: losses.
        OpSpec("cross_entropy", (1, 3), _cross_entropy.cross_entropy, _cross_entropy.reference),
        OpSpec(
            "fused_linear_cross_entropy",
            (1, 3),
            _fused_linear_cross_entropy.fused_linear_cross_entropy,
            _fused_linear_cross_entropy.reference,
        ),
        OpSpec("kl_div", (1, 3), _kl_div.kl_div, _kl_div.reference),
        OpSpec("jsd", (1, 3), _jsd.jsd, _jsd.reference),
        OpSpec("fused_linear_jsd", (1, 3), _fused_linear_jsd.fused_linear_jsd, _fused_linear_jsd.reference),
        OpSpec("tvd", (1, 3), _tvd.tvd, _tvd.reference),
    )
}

# The interface version is the newest op's: adding an op cannot forget the bump.
INTERFACE_VERSION = max(INTERFACE_VERSION, *(spec.since for spec in CATALOGUE.values()))


def ops_for_version(version: tuple[int, int]) -> list[OpSpec]:
    """The ops a backend implementing ``version`` must provide (same major, since <= version)."""
    return [s for s in CATALOGUE.values() if s.since[0] == version[0] and s.since <= version]


def signature_mismatch(spec: OpSpec, fn: Callable) -> str | None:
    """Describe how ``fn``'s signature differs from the contract, or None if equal.

    Names, kinds, order and defaults must match; annotations are not compared.
    """
    try:
        got = inspect.signature(fn)
    except (TypeError, ValueError) as e:
        return f"its signature cannot be read ({e})"

    def shape(sig: inspect.Signature) -> list[tuple]:
        return [(p.name, p.kind, p.default) for p in sig.parameters.values()]

    if shape(got) == shape(spec.signature):
        return None

    def text(sig: inspect.Signature) -> str:
        return str(
            sig.replace(
                parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()],
                return_annotation=inspect.Signature.empty,
            )
        )

    return f"expected {spec.name}{text(spec.signature)}, got {spec.name}{text(got)}"
