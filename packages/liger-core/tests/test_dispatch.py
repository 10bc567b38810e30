"""Dispatch: fallback warnings, strict mode, LIGER_BACKEND, per-op fallback for older
backends, and the functional and nn APIs on top."""

from __future__ import annotations

import warnings

import pytest
import torch

from liger_core import LigerBackendError, LigerFallbackWarning, LigerRMSNorm, liger_rms_norm
from liger_core.ops import rms_norm as contract

pytestmark = pytest.mark.usefixtures("clean_registry")


def recording_backend(fake_backend, calls, **overrides):
    def rms_norm(x, weight=None, eps=1e-6, offset=0.0, casting_mode="llama", in_place=False):
        calls.append(x.device.type)
        return contract.rms_norm(x, weight, eps, offset, casting_mode, in_place)

    return fake_backend(ops={"rms_norm": rms_norm}, **overrides)


def fallbacks(record):
    return [w for w in record if issubclass(w.category, LigerFallbackWarning)]


# -- fallback and strict mode --------------------------------------------------------------


def test_fallback_warns_once_per_op_and_device(clean_registry):
    x = torch.randn(4, 8)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(3):
            liger_rms_norm(x)
    (warning,) = fallbacks(record)
    message = str(warning.message)
    assert "no installed Liger backend serves device 'cpu'" in message
    assert "op 'rms_norm' runs on the slower PyTorch reference" in message
    assert warning.filename == __file__, "the warning should point at the caller's line"

    # Another device warns once on its own, naming the package that would serve it.
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(2):
            clean_registry.resolve("rms_norm", "xpu")
        liger_rms_norm(x)
    (warning,) = fallbacks(record)
    assert "device 'xpu'" in str(warning.message) and "pip install liger-ops-xpu" in str(warning.message)

    # A reset (new environment) warns again.
    clean_registry.reset()
    with pytest.warns(LigerFallbackWarning, match="device 'cpu'"):
        liger_rms_norm(x)


def test_strict_mode_turns_fallback_into_error(clean_registry, monkeypatch):
    monkeypatch.setenv("LIGER_STRICT", "1")
    clean_registry.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", LigerFallbackWarning)
        with pytest.raises(LigerBackendError, match=r"serves device 'cpu' and LIGER_STRICT is set.*'rms_norm'"):
            liger_rms_norm(torch.randn(2, 4))
        with pytest.raises(LigerBackendError, match=r"LIGER_STRICT.*pip install liger-ops-cuda"):
            clean_registry.resolve("rms_norm", "cuda")


def test_backend_serves_its_device_without_warning(fake_backend, clean_registry):
    calls = []
    clean_registry.register_backend(recording_backend(fake_backend, calls, device_types=("cpu",)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", LigerFallbackWarning)
        liger_rms_norm(torch.randn(2, 4))
    assert calls == ["cpu"]


def test_unknown_op_is_a_key_error(clean_registry):
    with pytest.raises(KeyError, match="unknown op 'nope'"):
        clean_registry.resolve("nope", "cpu")


# -- LIGER_BACKEND ---------------------------------------------------------------------------


def test_liger_backend_forces_named_backend_for_cpu_tensors(fake_backend, clean_registry, monkeypatch):
    calls = []
    clean_registry.register_backend(recording_backend(fake_backend, calls))  # serves xpu only
    x = torch.randn(3, 16)
    with pytest.warns(LigerFallbackWarning):
        liger_rms_norm(x)
    assert calls == []

    monkeypatch.setenv("LIGER_BACKEND", "fakevendor")
    clean_registry.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", LigerFallbackWarning)
        y = liger_rms_norm(x)
    assert calls == ["cpu"]
    torch.testing.assert_close(y, contract.rms_norm(x))


def test_liger_backend_reference_silences_fallback(clean_registry, monkeypatch):
    monkeypatch.setenv("LIGER_BACKEND", "reference")
    clean_registry.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", LigerFallbackWarning)
        liger_rms_norm(torch.randn(3, 16))


def test_liger_backend_naming_absent_backend(clean_registry, monkeypatch):
    monkeypatch.setenv("LIGER_BACKEND", "nosuch")
    clean_registry.reset()
    with pytest.raises(LigerBackendError) as info:
        liger_rms_norm(torch.randn(2, 4))
    message = str(info.value)
    assert "LIGER_BACKEND=nosuch names no installed backend" in message
    assert "installed: reference" in message
    assert "'nosuch' is no Liger backend (known: reference, cuda, ascend, xpu)" in message
    assert "pip install" not in message and "unset LIGER_BACKEND" in message


def test_absent_vendor_backend_says_how_to_install_it(clean_registry, monkeypatch):
    monkeypatch.delenv("LIGER_BACKEND", raising=False)
    clean_registry.reset()
    with pytest.raises(LigerBackendError) as info:
        clean_registry.get_backend("ascend")
    message = str(info.value)
    assert message.startswith("backend 'ascend' names no installed backend")  # not blaming LIGER_BACKEND
    assert "LIGER_BACKEND" not in message
    assert "pip install -e packages/liger-ops-ascend" in message


def test_liger_backend_naming_broken_backend(fake_backend, clean_registry, monkeypatch):
    clean_registry.register_backend(fake_backend(interface_version="2.0"))
    monkeypatch.setenv("LIGER_BACKEND", "fakevendor")
    clean_registry.reset()
    with pytest.raises(LigerBackendError, match=r"LIGER_BACKEND=fakevendor names an unusable backend.*2\.0"):
        liger_rms_norm(torch.randn(2, 4))


# -- a backend older than the core's interface -------------------------------------------


def test_older_minor_backend_falls_back_for_newer_op_only(fake_backend, clean_registry, interface_next):
    calls = []
    fake = recording_backend(fake_backend, calls, interface_version="1.0")
    clean_registry.register_backend(fake)
    assert clean_registry.problems() == {}

    with warnings.catch_warnings():
        warnings.simplefilter("error", LigerFallbackWarning)
        assert clean_registry.resolve("rms_norm", "xpu") is fake.ops["rms_norm"]
    with pytest.warns(LigerFallbackWarning) as record:
        fn = clean_registry.resolve("scale", "xpu")
    (warning,) = fallbacks(record)
    assert (
        "liger-ops-fakevendor 9.8.7 implements interface 1.0, which predates op 'scale'; op 'scale' runs on "
        "the slower PyTorch reference implementation (pip install -U liger-ops-fakevendor)"
    ) == str(warning.message)
    assert fn is interface_next.reference
    torch.testing.assert_close(fn(torch.ones(2)), torch.full((2,), 2.0))


def test_older_minor_backend_in_strict_mode(fake_backend, clean_registry, interface_next, monkeypatch):
    clean_registry.register_backend(fake_backend(interface_version="1.0"))
    monkeypatch.setenv("LIGER_STRICT", "1")
    clean_registry.reset()
    clean_registry.resolve("rms_norm", "xpu")
    with pytest.raises(LigerBackendError, match=r"predates op 'scale' and LIGER_STRICT is set"):
        clean_registry.resolve("scale", "xpu")


def test_backend_declaring_newer_minor_must_have_its_ops(fake_backend, clean_registry, interface_next):
    from liger_core.interface import CATALOGUE, format_version

    nxt = format_version(interface_next.since)
    ops = {name: spec.reference for name, spec in CATALOGUE.items() if name != "scale"}
    clean_registry.register_backend(fake_backend(interface_version=nxt, ops=ops))
    (problem,) = clean_registry.problems().values()
    assert f"declares op interface {nxt}" in problem.error
    assert f"lacks op 'scale', part of the interface since {nxt}" in problem.error


# -- functional API and nn module --------------------------------------------------------------


quiet_fallback = pytest.mark.filterwarnings("ignore::liger_core.registry.LigerFallbackWarning")


@quiet_fallback
@pytest.mark.parametrize("casting_mode", contract.CASTING_MODES)
def test_functional_matches_reference(casting_mode):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 16, generator=gen)
    w = torch.randn(16, generator=gen)
    dy = torch.randn(3, 5, 16, generator=gen)
    xa, wa = x.clone().requires_grad_(), w.clone().requires_grad_()
    xb, wb = x.clone().requires_grad_(), w.clone().requires_grad_()
    # Distinct values for every argument, so a mixed-up argument order shows.
    y = liger_rms_norm(xa, wa, 1e-3, 0.5, casting_mode, False)
    expected = contract.math(xb, wb, 1e-3, 0.5, casting_mode, False)
    torch.testing.assert_close(y, expected)
    y.backward(dy)
    expected.backward(dy)
    torch.testing.assert_close(xa.grad, xb.grad)
    torch.testing.assert_close(wa.grad, wb.grad)
    torch.testing.assert_close(liger_rms_norm(x), contract.math(x, None, 1e-6, 0.0, "llama", False))


@quiet_fallback
def test_functional_rejects_bad_arguments():
    with pytest.raises(ValueError, match="casting_mode must be one of"):
        liger_rms_norm(torch.randn(2, 4), casting_mode="bogus")
    with pytest.raises(ValueError, match=r"weight must have shape \(hidden,\) = \(4,\)"):
        liger_rms_norm(torch.randn(2, 4), torch.ones(3))


@quiet_fallback
def test_module_forward_backward_match_reference():
    torch.manual_seed(0)
    module = LigerRMSNorm(32, eps=1e-5, offset=1.0, casting_mode="gemma", init_fn="zeros")
    with torch.no_grad():
        module.weight.normal_()
    x = torch.randn(4, 32, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    w_ref = module.weight.detach().clone().requires_grad_()
    y = module(x)
    expected = contract.math(x_ref, w_ref, 1e-5, 1.0, "gemma", False)
    torch.testing.assert_close(y, expected)
    dy = torch.randn_like(y)
    y.backward(dy)
    expected.backward(dy)
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(module.weight.grad, w_ref.grad)


@quiet_fallback
def test_module_init_and_repr():
    module = LigerRMSNorm(16)
    assert torch.equal(module.weight, torch.ones(16))
    assert repr(module) == "LigerRMSNorm(16, eps=1e-06, offset=0.0, casting_mode='llama', in_place=False)"
    gemma = LigerRMSNorm(8, eps=1e-5, offset=1.0, casting_mode="gemma", init_fn="zeros", in_place=True)
    assert torch.equal(gemma.weight, torch.zeros(8))
    assert gemma.extra_repr() == "8, eps=1e-05, offset=1.0, casting_mode='gemma', in_place=True"
    # zeros + offset 1.0 is the plain normalisation.
    x = torch.randn(3, 8)
    torch.testing.assert_close(gemma(x), contract.math(x, None, 1e-5, 0.0, "gemma", False))
    typed = LigerRMSNorm(8, dtype=torch.bfloat16, device="cpu")
    assert typed.weight.dtype == torch.bfloat16 and typed.weight.device.type == "cpu"


def test_module_rejects_bad_options():
    with pytest.raises(ValueError, match=r"init_fn must be 'ones' or 'zeros'; got 'randn'"):
        LigerRMSNorm(8, init_fn="randn")
    with pytest.raises(ValueError, match=r"casting_mode must be one of \('llama', 'gemma', 'none'\); got 'fp8'"):
        LigerRMSNorm(8, casting_mode="fp8")


@quiet_fallback
def test_module_without_affine():
    module = LigerRMSNorm(12, elementwise_affine=False)
    assert module.weight is None
    assert list(module.parameters()) == []
    x = torch.randn(2, 3, 12, requires_grad=True)
    y = module(x)
    torch.testing.assert_close(y, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    y.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape


def test_forced_vendor_backend_off_its_device_needs_the_interpreter(fake_backend, clean_registry, monkeypatch):
    # A vendor package forced on CPU tensors without TRITON_INTERPRET=1: a clear error, not Triton's
    # "0 active drivers" from inside the first kernel launch.
    clean_registry.register_backend(fake_backend(name="xpu", distribution="liger-ops-xpu", device_types=("xpu",)))
    monkeypatch.setenv("LIGER_BACKEND", "xpu")
    clean_registry.reset()
    with pytest.raises(LigerBackendError, match=r"LIGER_BACKEND=xpu runs Triton kernels on xpu devices.*'cpu'"):
        liger_rms_norm(torch.randn(2, 4))
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the interpreter runs them on CPU tensors
    clean_registry.reset()
    assert clean_registry.REGISTRY.backend_for_device("cpu").name == "xpu"
