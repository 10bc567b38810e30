"""pytest plugin: which backend and device the conformance cases run on.

Backend: ``--liger-backend NAME`` or ``LIGER_CONFORMANCE_BACKEND`` (default ``reference``).
Device: ``--liger-device TYPE`` or ``LIGER_TEST_DEVICE``; by default the backend's own
device when present, else ``cpu`` (vendor kernels then need ``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import os

import pytest

from liger_core import registry
from liger_core.device import device_available


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("liger", "Liger conformance")
    group.addoption("--liger-backend", default=None, help="backend to check (default: reference)")
    group.addoption("--liger-device", default=None, help="device type for the inputs (default: auto)")


def _backend_name(config: pytest.Config) -> str:
    return config.getoption("liger_backend") or os.environ.get("LIGER_CONFORMANCE_BACKEND") or "reference"


def _device(config: pytest.Config, backend) -> str:
    chosen = config.getoption("liger_device") or os.environ.get("LIGER_TEST_DEVICE")
    if chosen:
        return chosen
    for device_type in backend.device_types:
        if device_available(device_type):
            return device_type
    return "cpu"


def pytest_report_header(config: pytest.Config) -> list[str]:
    try:
        backend = registry.get_backend(_backend_name(config))
    except Exception as e:  # noqa: BLE001 - shown in the header, raised again by the fixture
        return [f"liger conformance: backend unusable: {e}"]
    runtime = backend.runtime() if backend.runtime else "?"
    interp = " (Triton interpreter)" if os.environ.get("TRITON_INTERPRET") == "1" else ""
    return [
        f"liger conformance: backend {backend.name!r} from {backend.distribution} {backend.version}, "
        f"interface {backend.interface_version}; kernels on {runtime}{interp}; "
        f"device {_device(config, backend)}"
    ]


@pytest.fixture(scope="session")
def conformance_backend(request: pytest.FixtureRequest):
    return registry.get_backend(_backend_name(request.config))


@pytest.fixture(scope="session")
def conformance_device(request: pytest.FixtureRequest, conformance_backend) -> str:
    device = _device(request.config, conformance_backend)
    if not device_available(device):
        pytest.fail(f"--liger-device {device} requested but no such device is available")
    return device
