"""The Intel hardware helpers: EU count, warps, persistent grid, large-GRF launch options."""

import dataclasses

import pytest
import torch

from liger_ops_xpu import hardware


@pytest.fixture
def fresh_grf_mode():
    hardware.large_grf_mode.cache_clear()
    yield
    hardware.large_grf_mode.cache_clear()


def test_eu_count_env_override(monkeypatch):
    monkeypatch.setenv(hardware.EU_COUNT_ENV, "448")
    assert hardware.eu_count() == 448
    monkeypatch.setenv(hardware.EU_COUNT_ENV, "3")
    assert hardware.eu_count() == 3  # read on every call, not cached


@pytest.mark.parametrize("value", ["0", "-4"])
def test_eu_count_rejects_a_bad_override(monkeypatch, value):
    monkeypatch.setenv(hardware.EU_COUNT_ENV, value)
    with pytest.raises(ValueError, match=hardware.EU_COUNT_ENV):
        hardware.eu_count()


@pytest.mark.skipif(hardware.xpu_available(), reason="an XPU reports its own EU count")
def test_eu_count_stand_in_without_an_xpu(monkeypatch):
    monkeypatch.delenv(hardware.EU_COUNT_ENV, raising=False)
    assert hardware.eu_count() == hardware.INTERPRETER_EU_COUNT
    assert hardware.sub_group_size() == hardware.DEFAULT_SUB_GROUP_SIZE


def test_persistent_programs_scale_with_eus_and_warps(monkeypatch):
    monkeypatch.setenv(hardware.EU_COUNT_ENV, "512")
    assert hardware.persistent_programs(8) == 512 * hardware.THREADS_PER_EU_LARGE_GRF // 8
    assert hardware.persistent_programs(32) == 512 * hardware.THREADS_PER_EU_LARGE_GRF // 32
    monkeypatch.setenv(hardware.EU_COUNT_ENV, "1")
    assert hardware.persistent_programs(32) == 1


@pytest.mark.parametrize("device", ["cpu", "xpu"])
def test_interpreter_launches_get_no_grf_mode(device):
    if not hardware.interpreting():
        pytest.skip("kernels are compiled here, not interpreted")
    kernels = _all_kernels()
    assert len(kernels) >= 20  # every module's kernels, not just rms_norm's
    for kernel in kernels:
        assert hardware.interpreting(kernel)
        assert hardware.launch_kwargs(kernel, torch.device(device), 16) == {"num_warps": 16}


def _all_kernels() -> list:
    """Every launchable Triton kernel of the package (the ``_..._kernel`` functions)."""
    import importlib
    import pkgutil

    import liger_ops_xpu

    kernels = []
    for info in pkgutil.iter_modules(liger_ops_xpu.__path__):
        module = importlib.import_module(f"liger_ops_xpu.{info.name}")
        kernels += [v for k, v in vars(module).items() if k.startswith("_") and k.endswith("_kernel")]
    return kernels


def test_compiled_xpu_launches_get_the_large_grf(monkeypatch, fresh_grf_mode):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv(hardware.GRF_MODE_ENV, raising=False)
    compiled_kernel = object()  # stands for a JITFunction: not an InterpretedFunction
    kwargs = hardware.launch_kwargs(compiled_kernel, torch.device("xpu", 0), 32)
    mode = hardware.large_grf_mode()
    assert kwargs == ({"num_warps": 32} if mode is None else {"num_warps": 32, "grf_mode": mode})
    # Not for other devices (plain Triton rejects the keyword) nor for light kernels.
    assert hardware.launch_kwargs(compiled_kernel, torch.device("cuda"), 32) == {"num_warps": 32}
    assert hardware.launch_kwargs(compiled_kernel, "xpu", 8, register_heavy=False) == {"num_warps": 8}
    if mode is not None:
        with pytest.raises(ValueError, match="at most 32 warps"):
            hardware.launch_kwargs(compiled_kernel, "xpu", 64)


def test_launch_kwargs_want_a_power_of_two():
    with pytest.raises(ValueError, match="power of two"):
        hardware.launch_kwargs(None, "cpu", 12)


def test_installed_triton_grf_mode(fresh_grf_mode, monkeypatch):
    monkeypatch.delenv(hardware.GRF_MODE_ENV, raising=False)
    try:
        from triton.backends.intel import compiler  # noqa: F401
    except Exception:  # noqa: BLE001
        assert hardware.large_grf_mode() is None
    else:
        assert hardware.large_grf_mode() in ("256", "large")


def test_grf_mode_env_override(monkeypatch, fresh_grf_mode):
    monkeypatch.setenv(hardware.GRF_MODE_ENV, "off")
    assert hardware.large_grf_mode() is None
    hardware.large_grf_mode.cache_clear()
    monkeypatch.setenv(hardware.GRF_MODE_ENV, "auto")
    assert hardware.large_grf_mode() == "auto"


def test_grf_modes_of_old_and_new_intel_backends():
    @dataclasses.dataclass
    class OldOptions:  # triton-xpu 3.3: the default lists the accepted values
        grf_mode: tuple = ("small", "large", "auto", "default")

    @dataclasses.dataclass
    class NewOptions:  # later: a string, checked against literals when building the binary
        grf_mode: str = "default"

    new_source = "if options.grf_mode == '128':\n    ...\nelif options.grf_mode == \"256\":\n    ..."
    assert hardware.grf_modes_accepted_by(OldOptions, "") == {"small", "large", "auto", "default"}
    assert hardware.grf_modes_accepted_by(NewOptions, new_source) == {"128", "256"}
    assert hardware.grf_modes_accepted_by(NewOptions, "") == frozenset()
    assert hardware.grf_modes_accepted_by(object, new_source) == frozenset()
