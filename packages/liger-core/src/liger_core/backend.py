"""What a vendor package exposes: one `Backend` object through the `liger.backends`
entry-point group, and how core checks it at load."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from liger_core.__about__ import __version__ as CORE_VERSION
from liger_core.interface import (
    INTERFACE_VERSION,
    format_version,
    ops_for_version,
    parse_version,
    signature_mismatch,
)

ENTRY_POINT_GROUP = "liger.backends"


class LigerBackendError(RuntimeError):
    """A backend cannot be used: incompatible, incomplete, missing or disabled."""


@dataclass(frozen=True)
class Backend:
    """A vendor's implementation of the op interface.

    Attributes:
        name: short vendor name, used by ``LIGER_BACKEND`` (``"cuda"``, ``"ascend"``, ``"xpu"``).
        distribution: the pip distribution that ships it (``"liger-ops-cuda"``).
        version: that distribution's version.
        device_types: torch device types it serves natively (``("cuda",)``).
        interface_version: ``"MAJOR.MINOR"`` of the op interface it implements.
        ops: op name -> callable with exactly the catalogue's signature.
        runtime: optional ``() -> str`` describing the kernel runtime (Triton
            distribution and version) for ``liger info``.
    """

    name: str
    distribution: str
    version: str
    device_types: tuple[str, ...]
    interface_version: str
    ops: Mapping[str, Callable] = field(repr=False)
    runtime: Callable[[], str] | None = field(default=None, repr=False, compare=False)


def triton_runtime(*distributions: str) -> str:
    """Describe the Triton that runs a backend's kernels, for ``Backend.runtime``.

    The first installed of ``distributions`` names it (several ship the module ``triton``);
    otherwise the module's own version, marked as coming from none of them.
    """
    from importlib.metadata import PackageNotFoundError, version

    for dist in distributions:
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:
            continue
    try:
        import triton
    except ImportError as e:
        return f"no importable Triton ({e})"
    return f"triton {triton.__version__} (not from {', '.join(distributions)})"


def validate(backend: Backend) -> None:
    """Raise one LigerBackendError describing the first incompatibility found."""
    who = f"{backend.distribution} {backend.version}"
    core = f"liger-core {CORE_VERSION}"
    try:
        version = parse_version(backend.interface_version)
    except ValueError as e:
        raise LigerBackendError(
            f"{who} declares a malformed op interface version ({e}); {core} provides interface "
            f"{format_version(INTERFACE_VERSION)}. Fix: pip install -U {backend.distribution}"
        ) from None
    have, want = format_version(version), format_version(INTERFACE_VERSION)
    if version[0] > INTERFACE_VERSION[0]:
        raise LigerBackendError(
            f"{who} implements op interface {have}, but {core} provides interface {want}: "
            f"the major versions differ and liger-core is older. Fix: pip install -U liger-core"
        )
    if version[0] < INTERFACE_VERSION[0]:
        raise LigerBackendError(
            f"{who} implements op interface {have}, but {core} provides interface {want}: "
            f"the major versions differ and {backend.distribution} is older. "
            f"Fix: pip install -U {backend.distribution}"
        )
    for spec in ops_for_version(version):
        fn = backend.ops.get(spec.name)
        if fn is None:
            raise LigerBackendError(
                f"{who} declares op interface {have} ({core} provides {want}) but lacks op "
                f"{spec.name!r}, part of the interface since {format_version(spec.since)}. "
                f"Fix: pip install -U --force-reinstall {backend.distribution}"
            )
        mismatch = signature_mismatch(spec, fn)
        if mismatch:
            raise LigerBackendError(
                f"{who} (interface {have}) has a wrong signature for op {spec.name!r} under {core} "
                f"(interface {want}): {mismatch}. Fix: pip install -U {backend.distribution} liger-core"
            )
