"""Backend discovery and dispatch.

Backends come from the ``liger.backends`` entry-point group (or `register_backend`),
are validated once, and serve the device types they declare. `resolve` maps
``(op, device type)`` to a callable and caches it, so a call costs one dict lookup.

Environment::

    LIGER_BACKEND            force one backend for every device (``ascend``, ``reference``, ...),
                             e.g. to run a vendor's kernels in the Triton interpreter on CPU.
    LIGER_DISABLE_BACKENDS   comma-separated backend names to ignore (a broken install).
    LIGER_EXTRA_BACKENDS     comma-separated modules exposing ``BACKEND``, loaded as if installed
                             (a vendor package run from its source tree: ``liger_ops_cuda``); the
                             environment reaches child processes, unlike `register_backend`.
    LIGER_STRICT             ``1``: no reference fallback; an unserved device is an error.
"""

from __future__ import annotations

import importlib
import os
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points

import torch

from liger_core.backend import (
    ENTRY_POINT_GROUP,
    VENDORS,
    Backend,
    LigerBackendError,
    validate,
    vendor_for_device,
    vendor_named,
)
from liger_core.device import device_available, infer_device
from liger_core.interface import CATALOGUE, INTERFACE_VERSION, format_version

REFERENCE = "reference"


class LigerFallbackWarning(UserWarning):
    """An op runs on the slow PyTorch reference because no backend serves its device."""


def _reference_backend() -> Backend:
    from liger_core.__about__ import __version__

    return Backend(
        name=REFERENCE,
        distribution="liger-core",
        version=__version__,
        device_types=(),
        interface_version=format_version(INTERFACE_VERSION),
        ops={name: spec.reference for name, spec in CATALOGUE.items()},
        runtime=lambda: "PyTorch (no Triton)",
    )


@dataclass
class BackendProblem:
    name: str
    source: str
    error: str
    # The device types the broken backend declared, when it loaded far enough to say.
    device_types: tuple[str, ...] = ()


def _raise(e: Exception):
    raise e


def _env_list(name: str) -> set[str]:
    return {p.strip() for p in os.environ.get(name, "").split(",") if p.strip()}


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


class Registry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._extra: list[Backend] = []
        self.reset()

    def reset(self) -> None:
        """Forget discovered backends and cached dispatch (re-reads the environment)."""
        self._loaded = False
        self.backends: dict[str, Backend] = {}
        self.problems: dict[str, BackendProblem] = {}
        self.cache: dict[tuple[str, str], Callable] = {}

    # -- discovery -------------------------------------------------------------------------

    def register_backend(self, backend: Backend) -> None:
        """Add a backend without an installed entry point (source trees, tests)."""
        with self._lock:
            self._extra = [b for b in self._extra if b.name != backend.name] + [backend]
            self.reset()

    def unregister_backend(self, name: str) -> None:
        with self._lock:
            self._extra = [b for b in self._extra if b.name != name]
            self.reset()

    def _candidates(self) -> list[tuple[str, str, Callable[[], Backend]]]:
        found = []
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            dist = getattr(ep, "dist", None)
            source = f"{dist.name if dist else '?'} (entry point {ep.value})"
            found.append((ep.name, source, ep.load))
        for b in self._extra:
            found.append((b.name, "registered in-process", lambda b=b: b))
        for module in sorted(_env_list("LIGER_EXTRA_BACKENDS")):
            source = f"module {module} (LIGER_EXTRA_BACKENDS)"
            try:
                backend = importlib.import_module(module).BACKEND
            except Exception as e:  # noqa: BLE001 - reported as the module's problem, like an entry point's
                found.append((module, source, lambda e=e: _raise(e)))
                continue
            found.append((getattr(backend, "name", module), source, lambda b=backend: b))
        return found

    def load(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            disabled = _env_list("LIGER_DISABLE_BACKENDS")
            backends = {REFERENCE: _reference_backend()}
            problems: dict[str, BackendProblem] = {}
            for name, source, load in self._candidates():
                if name in disabled:
                    continue
                backend = None
                try:
                    obj = load()
                    backend = obj() if callable(obj) and not isinstance(obj, Backend) else obj
                    if not isinstance(backend, Backend):
                        raise LigerBackendError(
                            f"entry point {name!r} must give a liger_core.backend.Backend; got {type(backend).__name__}"
                        )
                    validate(backend)
                except Exception as e:  # noqa: BLE001 - any failure makes the backend unusable
                    msg = str(e) if isinstance(e, LigerBackendError) else f"failed to load: {e!r}"
                    declared = tuple(backend.device_types) if isinstance(backend, Backend) else ()
                    problems[name] = BackendProblem(name, source, msg, declared)
                    backends.pop(name, None)
                    continue
                backends[name] = backend
                problems.pop(name, None)
            self.backends, self.problems = backends, problems
            self._loaded = True

    # -- dispatch ---------------------------------------------------------------------------

    def backend_for_device(self, device_type: str) -> Backend | None:
        """The vendor backend serving ``device_type`` (None: reference fallback)."""
        self.load()
        forced = os.environ.get("LIGER_BACKEND", "").strip()
        if forced:
            backend = self._named(forced)
            if (
                vendor_named(backend.name) is not None  # this project's Triton packages (not a test's stub)
                and device_type not in backend.device_types
                and os.environ.get("TRITON_INTERPRET") != "1"
            ):
                # Triton would fail deep inside ("0 active drivers"): say what is wrong here.
                served = "/".join(backend.device_types)
                raise LigerBackendError(
                    f"LIGER_BACKEND={forced} runs Triton kernels on {served} devices, but these tensors are on "
                    f"{device_type!r} and TRITON_INTERPRET is not 1: move the tensors to a {served} device, set "
                    f"TRITON_INTERPRET=1 before the first op to run the kernels in the Triton interpreter, or "
                    f"unset LIGER_BACKEND"
                )
            return backend
        for problem in self.problems.values():
            if device_type in (problem.device_types or declared_devices(problem.name)):
                raise LigerBackendError(
                    f"the Liger backend {problem.name!r} for device {device_type!r} is unusable: "
                    f"{problem.error} (set LIGER_DISABLE_BACKENDS={problem.name} to fall back "
                    f"to the PyTorch reference)"
                )
        for backend in self.backends.values():
            if device_type in backend.device_types:
                return backend
        return None

    def _named(self, name: str) -> Backend:
        if name in self.backends:
            return self.backends[name]
        if name in self.problems:
            raise LigerBackendError(f"LIGER_BACKEND={name} names an unusable backend: {self.problems[name].error}")
        known = ", ".join(sorted(self.backends))
        # Blame LIGER_BACKEND only when it is what named the backend (`liger check --backend` also asks).
        from_env = os.environ.get("LIGER_BACKEND", "").strip() == name
        what = f"LIGER_BACKEND={name}" if from_env else f"backend {name!r}"
        vendor = vendor_named(name)
        if vendor is None:
            names = ", ".join([REFERENCE, *(v.name for v in VENDORS)])
            fix = f"{name!r} is no Liger backend (known: {names})"
        else:
            # The vendor packages are installed from the repository (they are not on the package index yet).
            fix = f"install {vendor.distribution} from the repository: pip install -e packages/{vendor.distribution}"
        raise LigerBackendError(
            f"{what} names no installed backend; installed: {known}. {fix}"
            + ("; or unset LIGER_BACKEND" if from_env else "")
        )

    def resolve(self, op: str, device: str | torch.device) -> Callable:
        """The callable serving ``op`` for tensors on ``device`` (a type like ``"cuda"`` or a
        ``torch.device``), cached under exactly what was passed.

        The functional API passes ``tensor.device``: reading ``tensor.device.type`` costs more
        than the rest of dispatch together (~1.5 us on torch 2.13), a hit on the cache keyed
        by the device object does not read it.
        """
        try:
            return self.cache[(op, device)]
        except KeyError:
            pass
        if op not in CATALOGUE:
            raise KeyError(f"unknown op {op!r}; the catalogue has {sorted(CATALOGUE)}")
        device_type = device if isinstance(device, str) else torch.device(device).type
        backend = self.backend_for_device(device_type)
        fn = backend.op(op) if backend is not None else None
        if fn is None:
            fn = self._fallback(op, device_type, backend)
        self.cache[(op, device)] = fn
        return fn

    def _fallback(self, op: str, device_type: str, backend: Backend | None) -> Callable:
        if backend is not None and backend.name == REFERENCE:
            return CATALOGUE[op].reference
        if backend is not None:
            why = (
                f"{backend.distribution} {backend.version} implements interface "
                f"{backend.interface_version}, which predates op {op!r}"
            )
            fix = f"pip install -U {backend.distribution}"
        else:
            why = f"no installed Liger backend serves device {device_type!r}"
            vendor = vendor_for_device(device_type)
            fix = f"pip install {vendor.distribution}" if vendor else "no vendor package targets this device"
        if strict():
            raise LigerBackendError(f"{why} and LIGER_STRICT is set, so op {op!r} cannot run ({fix})")
        warnings.warn(
            f"{why}; op {op!r} runs on the slower PyTorch reference implementation ({fix})",
            LigerFallbackWarning,
            stacklevel=4,
        )
        return CATALOGUE[op].reference


REGISTRY = Registry()
register_backend = REGISTRY.register_backend
unregister_backend = REGISTRY.unregister_backend
resolve = REGISTRY.resolve


def backends() -> dict[str, Backend]:
    REGISTRY.load()
    return dict(REGISTRY.backends)


def problems() -> dict[str, BackendProblem]:
    REGISTRY.load()
    return dict(REGISTRY.problems)


def get_backend(name: str) -> Backend:
    REGISTRY.load()
    return REGISTRY._named(name)


def reset() -> None:
    REGISTRY.reset()


def strict() -> bool:
    """LIGER_STRICT is set: no reference fallback."""
    return _env_flag("LIGER_STRICT")


def declared_devices(name: str) -> tuple[str, ...]:
    """The device types backend ``name`` serves, without importing a vendor package that is not
    loaded yet (so TRITON_INTERPRET can still be set before its kernels are defined)."""
    for b in REGISTRY._extra:
        if b.name == name:
            return tuple(b.device_types)
    if REGISTRY._loaded and name in REGISTRY.backends:
        return tuple(REGISTRY.backends[name].device_types)
    vendor = vendor_named(name)
    return (vendor.device_type,) if vendor else ()


@dataclass(frozen=True)
class Serving:
    """Who serves an op on a device, as dispatch would decide, without calling it."""

    backend: str | None  # None: nobody (see error)
    fallback: bool  # the PyTorch reference runs, with a warning
    error: str | None


def device_for_backend(backend: str | None, device: str | None) -> tuple[str, str | None]:
    """The device to run ``backend``'s kernels on (``device`` if given, else the first of its
    declared devices present, else the CPU), and a note when this set TRITON_INTERPRET=1 because
    ``backend``'s kernels must run on a device they do not serve natively. Call it before the
    backend is imported: Triton reads TRITON_INTERPRET when the kernels are defined."""
    if not backend or backend == REFERENCE:
        return device or infer_device(), None
    declared = declared_devices(backend)
    if device is None:
        device = next((d for d in declared if device_available(d)), "cpu")
    if declared and device not in declared and os.environ.get("TRITON_INTERPRET") != "1":
        os.environ["TRITON_INTERPRET"] = "1"
        return device, (
            f"no {'/'.join(declared)} device for backend {backend!r}: liger has set TRITON_INTERPRET=1 "
            f"(nothing to do), so its kernels run in the Triton interpreter on {device}"
        )
    return device, None


def serving(op: str, device_type: str) -> Serving:
    """Which backend serves ``op`` on ``device_type`` (no fallback warning is emitted)."""
    try:
        backend = REGISTRY.backend_for_device(device_type)
    except LigerBackendError as e:
        return Serving(None, False, str(e))
    if backend is not None and op in backend.ops:
        return Serving(backend.name, False, None)
    if strict():
        why = f"{backend.name} predates op {op!r}" if backend is not None else f"no backend serves {device_type!r}"
        return Serving(None, False, f"{why} and LIGER_STRICT is set")
    return Serving(REFERENCE, True, None)


def vendor_serves(op: str, device_type: str) -> bool:
    """Whether a vendor backend, not the PyTorch reference, serves ``op`` on ``device_type``.
    torch.compile takes the answer as a constant of the compiled code (`liger_core.compile`)."""
    return serving(op, device_type).backend not in (None, REFERENCE)
