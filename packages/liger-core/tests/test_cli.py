"""The `liger` command: `liger info` and `liger check`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from liger_core import __version__
from liger_core.cli import main
from liger_core.device import DEVICE_TYPES, device_available, infer_device
from liger_core.interface import CATALOGUE, INTERFACE_VERSION, format_version
from liger_core.ops.rms_norm import rms_norm as reference_rms_norm

pytestmark = pytest.mark.usefixtures("clean_registry")

SRC = Path(__file__).resolve().parents[1] / "src"


def run_main(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def info_json(capsys):
    rc, out, _ = run_main(capsys, "info", "--json")
    assert rc == 0
    return json.loads(out)


# -- liger info ------------------------------------------------------------------------------


def test_info_text(capsys):
    rc, out, _ = run_main(capsys, "info")
    assert rc == 0
    assert f"liger-core {__version__} (op interface {format_version(INTERFACE_VERSION)})" in out
    assert f"torch {torch.__version__}" in out
    assert f"default device: {infer_device()}" in out
    assert re.search(
        r"^  reference\s+liger-core\s+"
        + re.escape(__version__)
        + r"\s+"
        + re.escape(format_version(INTERFACE_VERSION))
        + r"\s+\(fallback\)\s+PyTorch",
        out,
        re.M,
    )
    header = re.search(r"^  op\s+since\s+cuda\s+npu\s+xpu\s+cpu$", out, re.M)
    assert header, out
    # No vendor package serves the CPU: the reference runs there, with a warning.
    assert re.search(r"^  rms_norm\s+1\.0\s+\S+\s+\S+\s+\S+\s+reference\*$", out, re.M), out
    assert "Environment overrides: none" in out


def test_info_json(capsys):
    data = info_json(capsys)
    assert data["liger_core"] == __version__
    assert data["interface_version"] == format_version(INTERFACE_VERSION)
    assert data["torch"] == torch.__version__
    assert data["default_device"] == infer_device()
    assert data["devices"]["cpu"] is True and set(data["devices"]) == set(DEVICE_TYPES)
    (reference,) = [b for b in data["backends"] if b["name"] == "reference"]
    assert reference == {
        "name": "reference",
        "distribution": "liger-core",
        "version": __version__,
        "interface_version": format_version(INTERFACE_VERSION),
        "device_types": [],
        "runtime": "PyTorch (no Triton)",
        "ops": sorted(CATALOGUE),
    }
    assert set(data["ops"]) == set(CATALOGUE)
    assert data["ops"]["rms_norm"]["since"] == "1.0"
    assert data["ops"]["rms_norm"]["devices"]["cpu"] == {"backend": "reference", "fallback": True, "error": None}
    assert data["env"] == {}


def test_info_does_not_warn(recwarn, capsys):
    run_main(capsys, "info")
    assert not [w for w in recwarn if "reference" in str(w.message)]


def test_info_shows_backends_env_and_forced_backend(fake_backend, clean_registry, monkeypatch, capsys):
    clean_registry.register_backend(fake_backend())
    clean_registry.register_backend(
        fake_backend(name="flaky", distribution="liger-ops-flaky", device_types=("cuda",), runtime=lambda: 1 / 0)
    )
    data = info_json(capsys)
    by_name = {b["name"]: b for b in data["backends"]}
    assert by_name["fakevendor"]["runtime"] == "fake runtime 1.2"
    assert by_name["fakevendor"]["device_types"] == ["xpu"]
    assert by_name["flaky"]["runtime"].startswith("unknown (ZeroDivisionError")
    devices = data["ops"]["rms_norm"]["devices"]
    assert devices["xpu"] == {"backend": "fakevendor", "fallback": False, "error": None}
    assert devices["cuda"]["backend"] == "flaky"
    assert devices["cpu"]["fallback"] is True

    monkeypatch.setenv("LIGER_BACKEND", "fakevendor")
    monkeypatch.setenv("LIGER_DISABLE_BACKENDS", "flaky")
    monkeypatch.setenv("LIGER_SOMETHING", "x")
    clean_registry.reset()
    data = info_json(capsys)
    assert "flaky" not in {b["name"] for b in data["backends"]}
    for device_type in DEVICE_TYPES:
        assert data["ops"]["rms_norm"]["devices"][device_type]["backend"] == "fakevendor"
    assert data["env"] == {"LIGER_BACKEND": "fakevendor", "LIGER_DISABLE_BACKENDS": "flaky", "LIGER_SOMETHING": "x"}

    rc, out, _ = run_main(capsys, "info")
    assert re.search(r"^  rms_norm\s+1\.0\s+fakevendor\s+fakevendor\s+fakevendor\s+fakevendor$", out, re.M), out
    assert "LIGER_BACKEND=fakevendor  (force this backend for every device)" in out
    assert "LIGER_SOMETHING=x  (not a variable liger-core reads)" in out


def test_info_strict_and_absent_forced_backend(clean_registry, monkeypatch, capsys):
    monkeypatch.setenv("LIGER_STRICT", "1")
    data = info_json(capsys)
    assert "LIGER_STRICT is set" in data["ops"]["rms_norm"]["devices"]["cpu"]["error"]

    monkeypatch.setenv("LIGER_BACKEND", "nosuch")
    clean_registry.reset()
    rc, out, _ = run_main(capsys, "info")
    assert rc == 0
    assert re.search(r"^  rms_norm\s+1\.0\s+ERROR\s+ERROR\s+ERROR\s+ERROR$", out, re.M), out
    assert "ERROR: LIGER_BACKEND=nosuch names no installed backend" in out


def test_info_lists_broken_backend_as_problem(fake_backend, clean_registry, capsys):
    clean_registry.register_backend(fake_backend(interface_version="2.0"))
    rc, out, _ = run_main(capsys, "info")
    assert rc == 0
    assert "Problems:\n  fakevendor from registered in-process:" in out
    assert "implements op interface 2.0" in out and "pip install -U liger-core" in out
    # Dispatch on its device is an error until it is disabled.
    assert re.search(r"^  rms_norm\s+1\.0\s+\S+\s+\S+\s+ERROR\s+reference\*$", out, re.M), out
    assert "LIGER_DISABLE_BACKENDS=fakevendor" in out
    data = info_json(capsys)
    (problem,) = data["problems"]
    assert problem["name"] == "fakevendor" and problem["device_types"] == ["xpu"]
    assert "liger-ops-fakevendor 9.8.7 implements op interface 2.0" in problem["error"]


def test_info_shows_per_op_fallback_for_older_backend(fake_backend, clean_registry, interface_next, capsys):
    clean_registry.register_backend(fake_backend(interface_version="1.0"))
    rc, out, _ = run_main(capsys, "info")
    nxt = format_version(interface_next.since)
    assert f"(op interface {nxt})" in out
    assert re.search(r"^  rms_norm\s+1\.0\s+reference\*\s+reference\*\s+fakevendor\s+reference\*$", out, re.M), out
    assert re.search(
        r"^  scale\s+" + re.escape(nxt) + r"\s+reference\*\s+reference\*\s+reference\*\s+reference\*$", out, re.M
    ), out


@pytest.mark.parametrize("argv", [["info"], ["info", "--json"]])
def test_python_m_liger_core_info(argv):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIGER_")}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-m", "liger_core", *argv], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    if "--json" in argv:
        data = json.loads(proc.stdout)
        assert "reference" in {b["name"] for b in data["backends"]}
        assert "rms_norm" in data["ops"]
    else:
        assert "reference" in proc.stdout and re.search(r"^  rms_norm\s+1\.0", proc.stdout, re.M)


def test_no_command_prints_help(capsys):
    rc, out, _ = run_main(capsys)
    assert rc == 2 and "info" in out and "check" in out


# -- liger check -----------------------------------------------------------------------------


def test_every_op_declares_smoke_samples():
    for name, op in CATALOGUE.items():
        assert len(op.smoke) >= 2, name
        assert all("shape" in s.params and "dtype" not in s.params for s in op.smoke), name


def expected_cases():
    return sum(3 * len(op.smoke) for op in CATALOGUE.values())


def test_check_reference_passes(capsys):
    rc, out, _ = run_main(capsys, "check", "--backend", "reference", "--device", "cpu")
    assert rc == 0, out
    n = expected_cases()
    assert f"[1/{n}] rms_norm float32 3x5 on reference/cpu ... PASS" in out
    for dtype in ("float32", "bfloat16", "float16"):
        # Each result once: its progress line, no table repeating the passes.
        assert len(re.findall(rf"(?:\] |^  )rms_norm\s+(?:reference\s+)?{dtype}\s+2x7x1000", out, re.M)) == 1, out
    assert not re.search(r"^  op\s+backend\s+dtype\s+shape\s+result", out, re.M)
    assert f"{n} passed, 0 failed" in out


def test_check_default_backend_on_this_machine(capsys):
    if infer_device() != "cpu":
        pytest.skip("the default device here is an accelerator")
    rc, out, _ = run_main(capsys, "check", "--ops", "rms_norm")
    assert rc == 0, out
    assert "on cpu, backend(s) reference" in out


def off_by_one_percent(x, weight=None, eps=1e-6, offset=0.0, casting_mode="llama", in_place=False):
    return reference_rms_norm(x, weight, eps, offset, casting_mode, in_place) * 1.01


def exploding(x, weight=None, eps=1e-6, offset=0.0, casting_mode="llama", in_place=False):
    raise RuntimeError("kernel exploded")


@pytest.mark.parametrize("via_env", [False, True], ids=["--backend", "LIGER_BACKEND"])
def test_check_fails_on_wrong_results(fake_backend, clean_registry, monkeypatch, capsys, via_env):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    clean_registry.register_backend(
        fake_backend(name="offby", device_types=("cpu",), ops={"rms_norm": off_by_one_percent})
    )
    if via_env:
        monkeypatch.setenv("LIGER_BACKEND", "offby")
        clean_registry.reset()
        rc, out, _ = run_main(capsys, "check")
    else:
        rc, out, _ = run_main(capsys, "check", "--backend", "offby")
    assert rc == 1
    assert "on cpu, backend(s) offby" in out
    assert re.search(r"^  rms_norm\s+offby\s+float32\s+3x5\s+FAIL\s+\S+\s+rms_norm output \(float32\)", out, re.M), out
    assert "Failures:" in out and "elements outside rtol=0.0001" in out
    assert re.search(r"\d+ passed, [1-9]\d* failed", out)
    assert "TRITON_INTERPRET" not in os.environ, "a backend serving the CPU needs no interpreter"


def test_check_reports_kernel_exceptions(fake_backend, clean_registry, capsys):
    clean_registry.register_backend(fake_backend(name="boom", device_types=("cpu",), ops={"rms_norm": exploding}))
    rc, out, _ = run_main(capsys, "check", "--backend", "boom")
    assert rc == 1
    assert "RuntimeError: kernel exploded" in out
    # The backend (interface 1.0) has rms_norm alone: every newer op is skipped.
    assert f"0 passed, {3 * len(CATALOGUE['rms_norm'].smoke)} failed" in out


INTERPRETED_BACKEND = """
    import os

    from liger_core.backend import Backend
    from liger_core.ops.rms_norm import rms_norm as reference

    SEEN_TRITON_INTERPRET = os.environ.get("TRITON_INTERPRET")

    BACKEND = Backend(
        name="ascend",
        distribution="liger-ops-ascend",
        version="0.0.1",
        device_types=("npu",),
        interface_version="1.0",
        ops={"rms_norm": reference},
    )
"""


def test_check_sets_triton_interpret_before_vendor_import(clean_registry, make_dist, monkeypatch, capsys):
    if device_available("npu"):
        pytest.skip("this machine has an NPU")
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # restored after the test
    make_dist(
        entry_points={"ascend": "liger_test_interp_vendor:BACKEND"},
        modules={"liger_test_interp_vendor": INTERPRETED_BACKEND},
        dist="liger-ops-ascend",
    )
    clean_registry.reset()
    rc, out, _ = run_main(capsys, "check", "--backend", "ascend")
    assert rc == 0, out
    assert sys.modules["liger_test_interp_vendor"].SEEN_TRITON_INTERPRET == "1"
    assert "set TRITON_INTERPRET=1" in out
    assert "on cpu (Triton interpreter), backend(s) ascend" in out


def test_check_unknown_op_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["check", "--ops", "rms_norm,nope"])
    assert info.value.code == 2
    assert "unknown op(s) nope; the catalogue has rms_norm" in capsys.readouterr().err


def test_check_absent_backend(capsys):
    rc, out, err = run_main(capsys, "check", "--backend", "nosuch", "--device", "cpu")
    assert rc == 1
    assert "names no installed backend" in err


def test_check_uninstalled_vendor_backend_gives_its_error_alone(monkeypatch, capsys):
    # Issue 37: `liger check --backend ascend` without liger-ops-ascend first said its kernels would run
    # in the Triton interpreter, then that the backend is not installed.
    from importlib.metadata import entry_points

    if any(ep.name == "ascend" for ep in entry_points(group="liger.backends")):
        pytest.skip("liger-ops-ascend is installed here")
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # restored afterwards; the check sets it to 1
    rc, out, err = run_main(capsys, "check", "--backend", "ascend")
    assert rc == 1
    assert "backend 'ascend' names no installed backend" in err
    assert "pip install -e packages/liger-ops-ascend" in err
    assert "TRITON_INTERPRET" not in out + err


def test_check_absent_device(capsys):
    if device_available("xpu"):
        pytest.skip("this machine has an XPU")
    rc, out, err = run_main(capsys, "check", "--device", "xpu")
    assert rc == 1
    assert "device 'xpu' is not available" in err


def test_check_broken_backend_on_its_device(fake_backend, clean_registry, capsys):
    clean_registry.register_backend(fake_backend(name="mycpu", device_types=("cpu",), ops={}))
    rc, out, _ = run_main(capsys, "check", "--device", "cpu")
    assert rc == 1
    assert "LIGER_DISABLE_BACKENDS=mycpu" in out


def test_check_older_backend_skips_newer_op(fake_backend, clean_registry, interface_next, capsys):
    clean_registry.register_backend(fake_backend(device_types=("cpu",)))
    rc, out, _ = run_main(capsys, "check", "--backend", "fakevendor")
    assert rc == 0, out
    assert re.search(
        r"^  scale\s+-\s+-\s+-\s+SKIP\s+\S+\s+fakevendor implements interface 1\.0, which predates", out, re.M
    )
    # Every op newer than the backend's 1.0 is skipped likewise.
    assert re.search(r"\d+ passed, 0 failed, \d+ skipped", out)


def test_check_runs_a_new_ops_declared_smoke_samples(fake_backend, clean_registry, interface_next, capsys):
    # Dispatch sends the new op to the reference (the backend predates it); its declaration's
    # smoke samples are what `liger check` runs, in every dtype.
    clean_registry.register_backend(fake_backend(device_types=("cpu",)))
    rc, out, _ = run_main(capsys, "check", "--device", "cpu")
    assert rc == 0, out
    assert re.search(r"^\[\d+/\d+\] scale bfloat16 2x7x9 on reference/cpu \.\.\. PASS", out, re.M), out
    assert re.search(r"^\[\d+/\d+\] rms_norm float32 3x5 on fakevendor/cpu \.\.\. PASS", out, re.M), out
