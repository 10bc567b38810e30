"""Who is timed for an op: this project (dispatch, or one backend), torch eager and torch.compile
of the op's PyTorch formula, and the peers its spec names (liger-kernel, cut-cross-entropy,
torch_npu), each as a callable on the spec's keyword arguments, or a status saying why not.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version
from typing import Any

import torch

from liger_core import registry
from liger_core.__about__ import __version__
from liger_core.backend import vendor_for_device
from liger_core.bench.spec import CUT_CROSS_ENTROPY, LIGER_KERNEL, TORCH_NPU, TRANSFORMERS_GROUPED_MM, BenchSpec

LIGER = "liger"
TORCH = "torch"
COMPILE = "torch.compile"
PROVIDERS = (LIGER, TORCH, COMPILE, LIGER_KERNEL, CUT_CROSS_ENTROPY, TORCH_NPU, TRANSFORMERS_GROUPED_MM)


@dataclass(frozen=True)
class PeerPackage:
    """Where a peer comes from and where it runs."""

    distribution: str
    module: str
    install: str
    devices: tuple[str, ...]


PEERS = {
    LIGER_KERNEL: PeerPackage(
        "liger-kernel", "liger_kernel", "pip install liger-kernel==0.8.5", ("cuda", "xpu", "npu")
    ),
    CUT_CROSS_ENTROPY: PeerPackage(
        "cut-cross-entropy", "cut_cross_entropy", "pip install cut-cross-entropy==25.1.1", ("cuda",)
    ),
    TORCH_NPU: PeerPackage("torch-npu", "torch_npu", "pip install torch-npu (with CANN)", ("npu",)),
    TRANSFORMERS_GROUPED_MM: PeerPackage(
        "transformers", "transformers", "pip install 'transformers>=5'", ("cuda", "xpu", "npu", "cpu")
    ),
}

OK, ERROR, NOT_INSTALLED, UNAVAILABLE = "ok", "error", "not installed", "unavailable"


@dataclass
class Provider:
    name: str
    status: str
    fn: Callable[..., Any] | None = None
    prepare: Callable[[dict], dict] | None = None
    implementation: str = ""
    reason: str = ""


def dist_version_or_none(dist: str) -> str | None:
    try:
        return dist_version(dist)
    except PackageNotFoundError:
        return None


def collect_versions(device_type: str, backend_name: str | None) -> dict[str, str]:
    """Python, torch, liger-core, every Triton, every peer installed, the backend timed, CUDA."""
    out = {"python": platform.python_version(), "torch": torch.__version__, "liger-core": __version__}
    peers = [p.distribution for p in PEERS.values()]
    for dist in ("triton", "pytorch-triton", "triton-ascend", "triton-xpu", *peers):
        v = dist_version_or_none(dist)
        if v:
            out[dist] = v
    if "liger-kernel" not in out and importlib.util.find_spec("liger_kernel") is not None:
        out["liger-kernel"] = "source"
    if backend_name and backend_name != registry.REFERENCE:
        try:
            b = registry.get_backend(backend_name)
            out[b.distribution] = b.version
        except Exception:  # noqa: BLE001 - versions are labels
            pass
    if device_type == "cuda" and torch.version.cuda:
        out["cuda"] = torch.version.cuda
    return out


def source_tree_hint(device_type: str) -> str:
    """Where this project's vendor package for ``device_type`` is importable but not loaded (a
    source tree on PYTHONPATH without an entry point): the one way to load it."""
    vendor = vendor_for_device(device_type)
    if vendor is None or vendor.name in registry.backends() or importlib.util.find_spec(vendor.module) is None:
        return ""
    return (
        f"{vendor.module} is importable but not installed (no entry point): set "
        f"LIGER_EXTRA_BACKENDS={vendor.module} to time its kernels"
    )


def _positional(op: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` called as dispatch calls it: every argument, positionally in the contract's order (an
    autograd Function's ``apply`` takes no keyword arguments on some torch versions)."""
    from liger_core.interface import CATALOGUE

    bind = CATALOGUE[op].bind
    return lambda **kw: fn(*bind(kw).values())


def liger_provider(op: str, device_type: str, backend: str | None) -> Provider:
    """This project's op: ``backend``'s kernels, or what dispatch picks for ``device_type``."""
    provider = _liger_provider(op, device_type, backend)
    if provider.fn is not None:
        provider.fn = _positional(op, provider.fn)
    return provider


def _liger_provider(op: str, device_type: str, backend: str | None) -> Provider:
    try:
        if backend:
            b = registry.get_backend(backend)
            fn = b.op(op)
            if fn is None:
                return Provider(LIGER, UNAVAILABLE, reason=f"backend {backend!r} ({b.interface_version}) lacks {op!r}")
            return Provider(LIGER, OK, fn, implementation=f"{b.name} {b.distribution} {b.version}")
        serving = registry.serving(op, device_type)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", registry.LigerFallbackWarning)
            fn = registry.resolve(op, device_type)
        if serving.backend not in (None, registry.REFERENCE):
            b = registry.get_backend(serving.backend)
            return Provider(LIGER, OK, fn, implementation=f"{b.name} {b.distribution} {b.version}")
        return Provider(LIGER, OK, fn, implementation=f"{registry.REFERENCE} (PyTorch fallback: no backend serves it)")
    except Exception as e:  # noqa: BLE001 - a broken backend is reported in its rows
        return Provider(LIGER, ERROR, reason=f"{type(e).__name__}: {e}")


def _compiled(spec: BenchSpec) -> Provider:
    # A fresh Dynamo cache per shape: recompiles past the cache limit would silently run eager,
    # and "automatic dynamic" shapes would time a generic kernel.
    torch._dynamo.reset()
    # Backward mode replays one graph's backward (retain_graph=True), which compiled graphs with
    # donated buffers refuse; donation only frees saved tensors early.
    if hasattr(torch._functorch.config, "donated_buffer"):
        torch._functorch.config.donated_buffer = False
    impl = f"torch.compile (inductor, donated_buffer off) {torch.__version__}"
    return Provider(COMPILE, OK, torch.compile(spec.torch_fn), implementation=impl)


def make_provider(name: str, spec: BenchSpec, device_type: str, backend: str | None) -> Provider | None:
    """The provider ``name`` for ``spec``'s op, or None when that peer has no such op."""
    if name == LIGER:
        return liger_provider(spec.op, device_type, backend)
    if name == TORCH:
        return Provider(TORCH, OK, spec.torch_fn, implementation=f"PyTorch eager {torch.__version__}")
    if name == COMPILE:
        return _compiled(spec)
    if name not in PEERS:
        raise ValueError(f"unknown provider {name!r}; known: {', '.join(PROVIDERS)}")
    peer = spec.peers.get(name)
    if peer is None:
        return None
    package = PEERS[name]
    if importlib.util.find_spec(package.module) is None:
        return Provider(name, NOT_INSTALLED, reason=package.install)
    # Under TRITON_INTERPRET=1 Triton peers run on CPU tensors (slowly): how CI checks the adapters.
    interpreted = device_type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1" and name != TORCH_NPU
    if device_type not in package.devices and not interpreted:
        return Provider(name, UNAVAILABLE, reason=f"{name} runs on {'/'.join(package.devices)}, not {device_type}")
    try:
        fn = peer.load()
    except Exception as e:  # noqa: BLE001 - an import that fails is reported, not fatal
        return Provider(name, NOT_INSTALLED, reason=f"import failed: {type(e).__name__}: {e}")
    version = dist_version_or_none(package.distribution) or "?"
    impl = f"{package.distribution} {version}" + (f" ({peer.note})" if peer.note else "")
    return Provider(name, OK, fn, peer.prepare, implementation=impl)


def default_providers(spec: BenchSpec, device_type: str) -> list[str]:
    """liger, torch, torch.compile, liger-kernel, and the op's other peers where they apply."""
    names = [LIGER, TORCH, COMPILE, LIGER_KERNEL]
    if CUT_CROSS_ENTROPY in spec.peers:
        names.append(CUT_CROSS_ENTROPY)
    if TORCH_NPU in spec.peers and device_type == "npu":
        names.append(TORCH_NPU)
    if TRANSFORMERS_GROUPED_MM in spec.peers:
        names.append(TRANSFORMERS_GROUPED_MM)
    return names


__all__ = [
    "COMPILE",
    "ERROR",
    "LIGER",
    "NOT_INSTALLED",
    "OK",
    "PEERS",
    "PROVIDERS",
    "TORCH",
    "UNAVAILABLE",
    "Provider",
    "collect_versions",
    "default_providers",
    "liger_provider",
    "make_provider",
    "source_tree_hint",
]
