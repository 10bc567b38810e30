"""Run the kernels natively on an NVIDIA GPU, else in the Triton interpreter on CPU.

The source tree's backend is loaded as if installed (LIGER_EXTRA_BACKENDS), and the shared
conformance cases run against it (LIGER_CONFORMANCE_BACKEND). Both are read from the
environment, so they are set before anything imports the registry or Triton.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("LIGER_EXTRA_BACKENDS", "liger_ops_cuda")
os.environ.setdefault("LIGER_CONFORMANCE_BACKEND", "cuda")

pytest_plugins = ["liger_core.conformance.plugin"]


@pytest.fixture(scope="session")
def backend(conformance_backend):
    """This package's backend, as the registry serves it."""
    assert conformance_backend.distribution == "liger-ops-cuda", conformance_backend
    return conformance_backend


@pytest.fixture(scope="session")
def device(conformance_device):
    """``cuda`` on a GPU, else ``cpu`` (the kernels then run in the Triton interpreter)."""
    return conformance_device


class NotLaunched:
    """Stands in for a kernel that must not run: launching it fails the test."""

    def __init__(self, name):
        self.name = name

    def __getitem__(self, grid):
        raise AssertionError(f"{self.name} was launched")


@pytest.fixture
def row_programs(monkeypatch):
    """Every cross-entropy forward on one program per row, rows streamed in steps of 32 (rows in
    the tests span several, with a ragged last one); the (row, tile) forward must not run."""
    from liger_ops_cuda import _cross_entropy, hardware

    monkeypatch.setattr(hardware, "CE_ROW_PROGRAMS_MIN_ROWS_PER_SM", 0)
    monkeypatch.setattr(hardware, "CE_ROW_BLOCK", 32)
    name = "_cross_entropy_partials_kernel"
    monkeypatch.setattr(_cross_entropy, name, NotLaunched(name))


@pytest.fixture
def tile_programs(monkeypatch):
    """Every cross-entropy forward on (row, tile) programs; the row kernel must not run."""
    from liger_ops_cuda import _cross_entropy, hardware

    monkeypatch.setattr(hardware, "CE_ROW_PROGRAMS_MIN_ROWS_PER_SM", 10**9)
    name = "_cross_entropy_row_kernel"
    monkeypatch.setattr(_cross_entropy, name, NotLaunched(name))


@pytest.fixture
def softmax_chunks(monkeypatch):
    """``softmax_chunks(fused, chunk)``: softmax and sparsemax rows wider than ``fused`` columns
    take the chunked plan, in ``chunk``-wide pieces."""
    from liger_ops_cuda import hardware

    def force(fused: int = 64, chunk: int = 32) -> None:
        monkeypatch.setattr(hardware, "SOFTMAX_MAX_FUSED_BLOCK", fused)
        monkeypatch.setattr(hardware, "SOFTMAX_CHUNK_BLOCK", chunk)

    return force
