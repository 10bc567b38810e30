"""Backend checks at load: each incompatibility is one clear error; broken backends are
listed as problems and block dispatch on their device until disabled."""

from __future__ import annotations

import sys
import warnings

import pytest
import torch

from liger_core import LigerBackendError, LigerFallbackWarning, __version__, liger_rms_norm
from liger_core.backend import validate
from liger_core.interface import CATALOGUE, INTERFACE_VERSION, format_version
from liger_core.ops.rms_norm import rms_norm as reference_rms_norm

pytestmark = pytest.mark.usefixtures("clean_registry")

WHO = "liger-ops-fakevendor 9.8.7"
CORE = f"liger-core {__version__}"
# The interface core provides (the newest op's `since`): errors quote it.
IFACE = format_version(INTERFACE_VERSION)


def short_rms_norm(x, weight=None, eps=1e-6):
    return reference_rms_norm(x, weight, eps)


def renamed_rms_norm(x, w=None, eps=1e-6, offset=0.0, casting_mode="llama", in_place=False):
    return reference_rms_norm(x, w, eps, offset, casting_mode, in_place)


def other_default_rms_norm(x, weight=None, eps=1e-5, offset=0.0, casting_mode="llama", in_place=False):
    return reference_rms_norm(x, weight, eps, offset, casting_mode, in_place)


def unannotated_rms_norm(x, weight=None, eps=1e-6, offset=0.0, casting_mode="llama", in_place=False):
    return reference_rms_norm(x, weight, eps, offset, casting_mode, in_place)


BROKEN = {
    "missing_op": (
        {"ops": {}},
        [WHO, "op interface 1.0", f"({CORE} provides {IFACE})", "lacks op 'rms_norm'", "since 1.0"],
        "pip install -U --force-reinstall liger-ops-fakevendor",
    ),
    "too_few_args": (
        {"ops": {"rms_norm": short_rms_norm}},
        [WHO, "(interface 1.0)", f"{CORE} (interface {IFACE})", "wrong signature for op 'rms_norm'"],
        "pip install -U liger-ops-fakevendor liger-core",
    ),
    "renamed_arg": (
        {"ops": {"rms_norm": renamed_rms_norm}},
        [WHO, "expected rms_norm(x, weight=None", "got rms_norm(x, w=None"],
        "pip install -U liger-ops-fakevendor liger-core",
    ),
    "other_default": (
        {"ops": {"rms_norm": other_default_rms_norm}},
        [WHO, "eps=1e-06", "eps=1e-05"],
        "pip install -U liger-ops-fakevendor liger-core",
    ),
    "newer_major": (
        {"interface_version": "2.0"},
        [WHO, "implements op interface 2.0", f"{CORE} provides interface {IFACE}", "liger-core is older"],
        "pip install -U liger-core",
    ),
    "older_major": (
        {"interface_version": "0.9"},
        [WHO, "implements op interface 0.9", f"{CORE} provides interface {IFACE}", "liger-ops-fakevendor is older"],
        "pip install -U liger-ops-fakevendor",
    ),
    "bad_version_string": (
        {"interface_version": "one.zero"},
        [WHO, "malformed op interface version", "'one.zero'", "MAJOR.MINOR", f"{CORE} provides interface {IFACE}"],
        "pip install -U liger-ops-fakevendor",
    ),
    "three_part_version": (
        {"interface_version": "1.0.2"},
        [WHO, "'1.0.2'", f"{CORE} provides interface {IFACE}"],
        "pip install -U liger-ops-fakevendor",
    ),
}


@pytest.mark.parametrize("case", BROKEN)
def test_validate_names_distribution_versions_and_fix(fake_backend, case):
    overrides, fragments, fix = BROKEN[case]
    with pytest.raises(LigerBackendError) as info:
        validate(fake_backend(**overrides))
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert message.endswith(f"Fix: {fix}"), message


@pytest.mark.parametrize("version", ["1.0", "1.7"])
def test_valid_backend_passes(fake_backend, version):
    # Annotations are not compared; a newer minor may carry ops this core does not know.
    ops = {name: spec.reference for name, spec in CATALOGUE.items()}
    ops.update(rms_norm=unannotated_rms_norm, future_op=lambda x: x)
    validate(fake_backend(interface_version=version, ops=ops))


@pytest.mark.parametrize("case", BROKEN)
def test_registered_broken_backend_is_a_problem(fake_backend, clean_registry, case):
    broken = fake_backend(**BROKEN[case][0])
    clean_registry.register_backend(broken)
    problems = clean_registry.problems()
    assert list(problems) == ["fakevendor"]
    problem = problems["fakevendor"]
    assert problem.source == "registered in-process"
    assert problem.device_types == ("xpu",)
    with pytest.raises(LigerBackendError) as info:
        validate(broken)
    assert problem.error == str(info.value)
    assert "fakevendor" not in clean_registry.backends()


@pytest.mark.parametrize(
    "name,device_type",
    [("fakevendor", "xpu"), ("ascend", "npu"), ("mycpu", "cpu")],
)
def test_dispatch_on_broken_backends_device_raises(fake_backend, clean_registry, name, device_type):
    clean_registry.register_backend(fake_backend(name=name, device_types=(device_type,), ops={}))
    with pytest.raises(LigerBackendError) as info:
        clean_registry.resolve("rms_norm", device_type)
    message = str(info.value)
    assert f"Liger backend {name!r} for device {device_type!r} is unusable" in message
    assert "lacks op 'rms_norm'" in message
    assert f"LIGER_DISABLE_BACKENDS={name}" in message
    # Other devices are not affected.
    other = "cuda" if device_type != "cuda" else "xpu"
    with pytest.warns(LigerFallbackWarning):
        clean_registry.resolve("rms_norm", other)


def test_disabled_broken_backend_falls_back_with_one_warning(fake_backend, clean_registry, monkeypatch):
    clean_registry.register_backend(fake_backend(name="mycpu", device_types=("cpu",), ops={}))
    monkeypatch.setenv("LIGER_DISABLE_BACKENDS", "other, mycpu")
    clean_registry.reset()
    assert clean_registry.problems() == {}
    assert "mycpu" not in clean_registry.backends()
    x = torch.randn(3, 8)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(3):
            y = liger_rms_norm(x)
    fallbacks = [w for w in record if issubclass(w.category, LigerFallbackWarning)]
    assert len(fallbacks) == 1, [str(w.message) for w in record]
    assert "device 'cpu'" in str(fallbacks[0].message)
    torch.testing.assert_close(y, reference_rms_norm(x))


# -- entry points --------------------------------------------------------------------------

BACKEND_MODULE = """
    from liger_core.backend import Backend
    from liger_core.ops.rms_norm import rms_norm as reference

    CALLS = []


    def rms_norm(x, weight=None, eps=1e-6, offset=0.0, casting_mode="llama", in_place=False):
        CALLS.append(x.device.type)
        return reference(x, weight, eps, offset, casting_mode, in_place)


    BACKEND = Backend(
        name="epvendor",
        distribution="liger-ops-epvendor",
        version="0.0.1",
        device_types=("xpu",),
        interface_version="1.0",
        ops={"rms_norm": rms_norm},
    )


    def make_backend():
        return BACKEND


    NOT_A_BACKEND = object()
"""


def test_entry_point_discovery(clean_registry, make_dist):
    make_dist(
        entry_points={
            "epvendor": "liger_test_epvendor:BACKEND",
            "epfactory": "liger_test_epvendor:make_backend",
            "epmissing": "liger_test_no_such_module:BACKEND",
            "epwrong": "liger_test_epvendor:NOT_A_BACKEND",
        },
        modules={"liger_test_epvendor": BACKEND_MODULE},
        dist="liger-ops-epvendor",
    )
    clean_registry.reset()
    backends = clean_registry.backends()
    assert backends["epvendor"].distribution == "liger-ops-epvendor"
    assert backends["epfactory"] is backends["epvendor"]
    problems = clean_registry.problems()
    assert set(problems) == {"epmissing", "epwrong"}
    assert problems["epmissing"].source == "liger-ops-epvendor (entry point liger_test_no_such_module:BACKEND)"
    assert "failed to load" in problems["epmissing"].error
    assert "No module named 'liger_test_no_such_module'" in problems["epmissing"].error
    assert "must give a liger_core.backend.Backend; got object" in problems["epwrong"].error

    fn = clean_registry.resolve("rms_norm", "xpu")
    module = sys.modules["liger_test_epvendor"]
    assert fn is module.rms_norm
    fn(torch.randn(2, 4))
    assert module.CALLS == ["cpu"]


def test_entry_point_disabled_is_not_imported(clean_registry, make_dist, monkeypatch):
    make_dist(
        entry_points={"epvendor": "liger_test_epvendor_off:BACKEND"},
        modules={"liger_test_epvendor_off": BACKEND_MODULE},
    )
    monkeypatch.setenv("LIGER_DISABLE_BACKENDS", "epvendor")
    clean_registry.reset()
    assert "epvendor" not in clean_registry.backends()
    assert clean_registry.problems() == {}
    assert "liger_test_epvendor_off" not in sys.modules


def test_triton_runtime_names_the_first_installed_distribution():
    from liger_core.backend import triton_runtime

    # Core never needs Triton: without one installed this still answers, naming the problem.
    text = triton_runtime("no-such-triton-dist")
    assert "(not from no-such-triton-dist)" in text or text.startswith("no importable Triton")
    assert triton_runtime("no-such-triton-dist", "torch").startswith("torch ")


def test_extra_backends_from_the_environment(clean_registry, make_dist, monkeypatch):
    """LIGER_EXTRA_BACKENDS: a vendor package importable from a source tree, no entry point; the
    variable reaches child processes (a registration in-process does not)."""
    make_dist(entry_points={}, modules={"liger_test_srcvendor": BACKEND_MODULE})
    monkeypatch.setenv("LIGER_EXTRA_BACKENDS", "liger_test_srcvendor, liger_test_no_such_src_module")
    clean_registry.reset()
    backends = clean_registry.backends()
    module = sys.modules["liger_test_srcvendor"]
    assert backends[module.BACKEND.name] is module.BACKEND
    assert clean_registry.resolve("rms_norm", "xpu") is module.rms_norm
    problem = clean_registry.problems()["liger_test_no_such_src_module"]
    assert problem.source == "module liger_test_no_such_src_module (LIGER_EXTRA_BACKENDS)"
    assert "No module named 'liger_test_no_such_src_module'" in problem.error
