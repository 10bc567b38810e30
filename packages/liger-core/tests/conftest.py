from __future__ import annotations

import sys
import textwrap
import uuid

import pytest
import torch

from liger_core import registry
from liger_core.backend import Backend
from liger_core.op import Op, sample
from liger_core.ops.rms_norm import rms_norm as reference_rms_norm

pytest_plugins = ["liger_core.conformance.plugin"]

LIGER_ENV = ("LIGER_BACKEND", "LIGER_DISABLE_BACKENDS", "LIGER_STRICT", "LIGER_EXTRA_BACKENDS")


def _fake_backend(**overrides) -> Backend:
    """A valid backend (reference kernels) unless ``overrides`` break it."""
    fields = {
        "name": "fakevendor",
        "distribution": "liger-ops-fakevendor",
        "version": "9.8.7",
        "device_types": ("xpu",),
        "interface_version": "1.0",
        "ops": {"rms_norm": reference_rms_norm},
        "runtime": lambda: "fake runtime 1.2",
    }
    fields.update(overrides)
    return Backend(**fields)


@pytest.fixture
def fake_backend():
    """Factory for in-test backends: ``fake_backend(name=..., ops=...)``."""
    return _fake_backend


@pytest.fixture
def clean_registry(monkeypatch):
    """No LIGER_* variables, no backend registered in-process, a fresh registry; restored after.

    Clears every LIGER_* variable (CI's and a vendor conftest's too) and any backend another
    test session registered, so these tests see core alone wherever they run.
    """
    import os

    for name in [n for n in os.environ if n.startswith("LIGER_") or n == "TRITON_INTERPRET"]:
        monkeypatch.delenv(name, raising=False)
    saved = list(registry.REGISTRY._extra)
    registry.REGISTRY._extra = []
    registry.reset()
    yield registry
    registry.REGISTRY._extra = saved
    registry.reset()


@pytest.fixture
def make_dist(tmp_path, monkeypatch):
    """Install a fake distribution with ``liger.backends`` entry points on sys.path.

    ``make_dist(entry_points={"name": "module:BACKEND"}, modules={"module": "source"})``;
    returns the directory. Modules it created are dropped from sys.modules afterwards.
    """
    created: list[str] = []

    def make(entry_points: dict[str, str], modules: dict[str, str] | None = None, dist: str = "liger-ops-fake"):
        site = tmp_path / f"site-{uuid.uuid4().hex[:8]}"
        info = site / f"{dist.replace('-', '_')}-0.0.1.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.0.1\n")
        lines = "\n".join(f"{k} = {v}" for k, v in entry_points.items())
        (info / "entry_points.txt").write_text(f"[liger.backends]\n{lines}\n")
        for mod, source in (modules or {}).items():
            (site / f"{mod}.py").write_text(textwrap.dedent(source))
            created.append(mod)
        monkeypatch.syspath_prepend(str(site))
        return site

    yield make
    for mod in created:
        sys.modules.pop(mod, None)


def scale(x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
    """A simulated op added by the interface minor after core's current one: ``x * scale``."""
    return x * scale


def _scale_args(device, shape=(3, 5), dtype=torch.float32):
    return dict(x=torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(device, dtype))


def scale_op(since: tuple[int, int]) -> Op:
    """The declaration of the simulated op ``scale``."""
    return Op(
        scale,
        since=since,
        math=lambda x, s: x * s,
        grads=("x",),
        samples=lambda: [sample(_scale_args)],
        smoke=(sample(_scale_args, shape=(3, 5)), sample(_scale_args, shape=(2, 7, 9))),
        error_sample=sample(_scale_args),
        errors=(),
    )


@pytest.fixture
def interface_next(monkeypatch, clean_registry):
    """Core at the next interface minor, which adds op ``scale`` (backends at 1.0 predate it,
    and every real op after 1.0 too). ``interface_next.since`` is that version."""
    from liger_core import backend, cli, interface

    nxt = (interface.INTERFACE_VERSION[0], interface.INTERFACE_VERSION[1] + 1)
    for module in (interface, backend, registry, cli):
        monkeypatch.setattr(module, "INTERFACE_VERSION", nxt)
    spec = scale_op(nxt)
    monkeypatch.setitem(interface.CATALOGUE, "scale", spec)
    registry.reset()
    yield spec
    registry.reset()
