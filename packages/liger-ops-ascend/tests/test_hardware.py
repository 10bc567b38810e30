"""The SoC table, the run-time query and the environment overrides."""

from __future__ import annotations

import pytest
import torch

from liger_ops_ascend import hardware
from liger_ops_ascend.launch import Tile


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ("LIGER_ASCEND_SOC", "LIGER_ASCEND_VECTOR_CORES", "LIGER_ASCEND_UB_BYTES"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    "soc,ub_kib,ai,vector",
    [
        ("Ascend910B2", 192, 24, 48),
        ("Ascend910B4", 192, 20, 40),
        ("Ascend910_9391", 192, 24, 48),
        ("Ascend950", 256, 32, 64),
    ],
)
def test_soc_table(soc, ub_kib, ai, vector):
    hw = hardware.for_soc(soc)
    assert (hw.ub_bytes, hw.ai_cores, hw.vector_cores) == (ub_kib * 1024, ai, vector)
    assert hw.ub_budget == ub_kib * 1024 // 2  # double buffering halves the UB


@pytest.mark.parametrize(
    "name,family",
    [("Ascend910B2C", "Ascend910B2C"), ("Ascend910_9372", "Ascend910_9391"), ("Ascend950PR_9579", "Ascend950")],
)
def test_soc_families(name, family):
    assert hardware.lookup_soc(name) == hardware.SOC_TABLE[family]


def test_default_without_npu():
    hw = hardware.current(torch.device("cpu"))
    assert hw == hardware.for_soc(hardware.DEFAULT_SOC) and hw.soc == "Ascend910B2"


@pytest.mark.filterwarnings("ignore::UserWarning")  # triton-ascend: no NPU compiler (ccec) here
def test_runtime_query_fails_softly_without_npu():
    assert hardware._query_device.__wrapped__(0) == (None, None, None)


def test_env_overrides(monkeypatch):
    monkeypatch.setenv("LIGER_ASCEND_SOC", "Ascend950")
    assert hardware.current().ub_bytes == 256 * 1024 and hardware.current().vector_cores == 64
    monkeypatch.setenv("LIGER_ASCEND_VECTOR_CORES", "7")
    monkeypatch.setenv("LIGER_ASCEND_UB_BYTES", "0x10000")
    hw = hardware.current()
    assert (hw.soc, hw.vector_cores, hw.ub_bytes, hw.ub_budget) == ("Ascend950", 7, 65536, 32768)


@pytest.mark.parametrize(
    "name,value,pattern",
    [
        ("LIGER_ASCEND_SOC", "Ascend310P3", r"unknown Ascend SoC 'Ascend310P3'; known: Ascend910B1"),
        ("LIGER_ASCEND_VECTOR_CORES", "many", r"LIGER_ASCEND_VECTOR_CORES must be a positive integer; got 'many'"),
        ("LIGER_ASCEND_UB_BYTES", "-1", r"LIGER_ASCEND_UB_BYTES must be a positive integer; got '-1'"),
    ],
)
def test_bad_env(monkeypatch, name, value, pattern):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=pattern):
        hardware.current()


def test_alignment_helpers():
    assert [hardware.align_up(n) for n in (0, 1, 32, 33, 100)] == [0, 32, 32, 64, 128]
    assert (hardware.min_block(2), hardware.min_block(4)) == (16, 8)
    assert Tile("t", 3, 5, 2).nbytes == 3 * 32  # each 10-byte row padded to 32 bytes


def test_unknown_device_soc_plans_for_the_default_with_a_warning():
    with pytest.warns(RuntimeWarning, match=r"does not know the UB size of SoC 'AscendNext'.*LIGER_ASCEND_UB_BYTES"):
        assert hardware._known_or_default.__wrapped__("AscendNext") == hardware.SOC_TABLE[hardware.DEFAULT_SOC]
