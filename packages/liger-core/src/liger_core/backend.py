"""What a vendor package exposes: one `Backend` object through the `liger.backends`
entry-point group, and how core checks it at load.

A vendor package marks each op's implementation with `implements` (a function, or an autograd
Function whose ``forward`` takes the op's arguments) and builds its backend with
`vendor_backend`, which collects the marked implementations from its modules and derives the
interface version they implement from the catalogue. Adding an op to a vendor package is then
one module: nothing else lists the ops.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from liger_core.__about__ import __version__ as CORE_VERSION
from liger_core.interface import (
    CATALOGUE,
    INTERFACE_VERSION,
    format_version,
    ops_for_version,
    parse_version,
    signature_mismatch,
)
from liger_core.op import implementation_callable as op_callable

ENTRY_POINT_GROUP = "liger.backends"


class LigerBackendError(RuntimeError):
    """A backend cannot be used: incompatible, incomplete, missing or disabled."""


@dataclass(frozen=True)
class Vendor:
    """A vendor package this project ships: where users are sent for a device, and what a
    backend that failed to load would have served."""

    name: str  # the backend's name (LIGER_BACKEND=<name>)
    distribution: str
    module: str
    device_type: str


# The one table of this project's vendor packages.
VENDORS: tuple[Vendor, ...] = (
    Vendor("cuda", "liger-ops-cuda", "liger_ops_cuda", "cuda"),
    Vendor("ascend", "liger-ops-ascend", "liger_ops_ascend", "npu"),
    Vendor("xpu", "liger-ops-xpu", "liger_ops_xpu", "xpu"),
)


def vendor_named(name: str) -> Vendor | None:
    return next((v for v in VENDORS if v.name == name), None)


def vendor_for_device(device_type: str) -> Vendor | None:
    return next((v for v in VENDORS if v.device_type == device_type), None)


@dataclass(frozen=True)
class Backend:
    """A vendor's implementation of the op interface.

    Attributes:
        name: short vendor name, used by ``LIGER_BACKEND`` (``"cuda"``, ``"ascend"``, ``"xpu"``).
        distribution: the pip distribution that ships it (``"liger-ops-cuda"``).
        version: that distribution's version.
        device_types: torch device types it serves natively (``("cuda",)``).
        interface_version: ``"MAJOR.MINOR"`` of the op interface it implements.
        ops: op name -> implementation: a function with the contract's parameters (names and
            order; defaults may be left out: dispatch passes every argument, positionally), or an
            autograd Function whose ``forward(ctx, ...)`` takes them (its ``apply`` is called; on
            some torch versions it takes no keyword arguments).
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

    def op(self, name: str) -> Callable | None:
        """The callable serving op ``name``, or None."""
        impl = self.ops.get(name)
        return None if impl is None else op_callable(impl)


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


# -- vendor packages ---------------------------------------------------------------------------

_OP_MARK = "__liger_op__"


def implements(*ops: str) -> Callable[[Callable], Callable]:
    """Mark a function or autograd Function as a vendor's implementation of ``ops`` (usually one).

    The object is returned unchanged (dispatch calls it directly); `vendor_backend` collects it.
    """
    unknown = [op for op in ops if op not in CATALOGUE]
    if unknown or not ops:
        raise LigerBackendError(
            f"implements({', '.join(map(repr, ops))}): liger-core {CORE_VERSION} has no op "
            f"{', '.join(map(repr, unknown)) or '(none named)'}; its catalogue has {', '.join(CATALOGUE)}. "
            f"Fix: pip install -U liger-core"
        )

    def mark(impl: Callable) -> Callable:
        # The object's own mark (a subclass of a marked Function does not inherit its parent's ops).
        setattr(impl, _OP_MARK, tuple(vars(impl).get(_OP_MARK, ())) + ops)
        return impl

    return mark


def collect_ops(package: str) -> dict[str, Callable]:
    """Every `implements`-marked object defined in the modules of ``package`` (a package name),
    by op name. The module calling this (its ``backend``) is skipped."""
    pkg = importlib.import_module(package)
    found: dict[str, tuple[Callable, str]] = {}
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name == "backend":
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        for obj in vars(module).values():
            if getattr(obj, "__module__", None) != module.__name__:
                continue  # imported from elsewhere: counted where it is defined
            marks = vars(obj).get(_OP_MARK, ()) if hasattr(obj, "__dict__") else ()
            for op in marks:
                where = f"{module.__name__}.{getattr(obj, '__qualname__', obj)}"
                if op in found:
                    raise LigerBackendError(f"{package}: op {op!r} is implemented twice, by {found[op][1]} and {where}")
                found[op] = (obj, where)
    return {op: found[op][0] for op in CATALOGUE if op in found}


def vendor_backend(
    name: str,
    distribution: str,
    version: str,
    device_types: tuple[str, ...],
    package: str,
    runtime: Callable[[], str] | None = None,
) -> Backend:
    """A vendor package's backend: its `implements`-marked ops, at the interface version of the
    newest of them (`validate` then requires every older op of that version)."""
    ops = collect_ops(package)
    newest = max((CATALOGUE[op].since for op in ops), default=(INTERFACE_VERSION[0], 0))
    return Backend(name, distribution, version, tuple(device_types), format_version(newest), ops, runtime)


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
        impl = backend.ops.get(spec.name)
        if impl is None:
            raise LigerBackendError(
                f"{who} declares op interface {have} ({core} provides {want}) but lacks op "
                f"{spec.name!r}, part of the interface since {format_version(spec.since)}. "
                f"Fix: pip install -U --force-reinstall {backend.distribution}"
            )
        mismatch = signature_mismatch(spec, impl)
        if mismatch:
            raise LigerBackendError(
                f"{who} (interface {have}) has a wrong signature for op {spec.name!r} under {core} "
                f"(interface {want}): {mismatch}. Fix: pip install -U {backend.distribution} liger-core"
            )
