"""How a vendor package builds its backend: `implements` marks each op's implementation,
`vendor_backend` collects them and derives the interface version they implement."""

from __future__ import annotations

import sys
import textwrap

import pytest

from liger_core.backend import LigerBackendError, implements, validate, vendor_backend
from liger_core.interface import CATALOGUE, format_version


def _package(tmp_path, monkeypatch, name: str, modules: dict[str, str]) -> str:
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for mod, source in modules.items():
        (pkg / f"{mod}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield_names = [n for n in sys.modules if n == name or n.startswith(name + ".")]
    for n in yield_names:
        sys.modules.pop(n)
    return name


RMS = """
    import torch
    from liger_core.backend import implements
    from liger_core.ops.rms_norm import check_args, math

    @implements("rms_norm")
    class LigerRMSNormFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, eps, offset, casting_mode, in_place):
            check_args(x, weight, eps, offset, casting_mode, in_place)
            return math(x, weight, eps, offset, casting_mode, in_place)
"""
SOFTMAX = """
    from liger_core.backend import implements
    from liger_core.ops.softmax import softmax as reference

    @implements("softmax")
    def softmax(x):
        return reference(x)
"""


def test_collects_marked_ops_and_derives_the_version(tmp_path, monkeypatch):
    name = _package(tmp_path, monkeypatch, "liger_ops_vb1", {"rms_norm": RMS, "_helpers": "X = 1\n"})
    b = vendor_backend("vb1", "liger-ops-vb1", "0.0.1", ("cpu",), name)
    assert list(b.ops) == ["rms_norm"] and b.interface_version == "1.0"
    validate(b)  # an autograd Function, no defaults: valid
    import torch

    x = torch.randn(3, 8)
    torch.testing.assert_close(b.op("rms_norm")(x, None, 1e-6, 0.0, "llama", False), CATALOGUE["rms_norm"].reference(x))


def test_a_newer_op_raises_the_version_and_older_ops_are_then_required(tmp_path, monkeypatch):
    name = _package(tmp_path, monkeypatch, "liger_ops_vb2", {"rms_norm": RMS, "softmax": SOFTMAX})
    b = vendor_backend("vb2", "liger-ops-vb2", "0.0.1", ("cpu",), name)
    assert b.interface_version == format_version(CATALOGUE["softmax"].since)
    with pytest.raises(LigerBackendError, match="lacks op 'fused_add_rms_norm', part of the interface since 1.1"):
        validate(b)


def test_an_op_implemented_twice_is_an_error(tmp_path, monkeypatch):
    name = _package(tmp_path, monkeypatch, "liger_ops_vb3", {"a": RMS, "b": RMS})
    with pytest.raises(LigerBackendError, match="op 'rms_norm' is implemented twice, by liger_ops_vb3.a.Liger"):
        vendor_backend("vb3", "liger-ops-vb3", "0.0.1", ("cpu",), name)


def test_an_op_this_core_does_not_know_is_an_error():
    with pytest.raises(LigerBackendError, match=r"has no op 'frobnicate'.*pip install -U liger-core"):
        implements("frobnicate")


def test_wrong_parameter_names_fail_validation(tmp_path, monkeypatch):
    source = SOFTMAX.replace("def softmax(x):", "def softmax(logits):").replace("reference(x)", "reference(logits)")
    name = _package(tmp_path, monkeypatch, "liger_ops_vb4", {"rms_norm": RMS, "softmax": source})
    b = vendor_backend("vb4", "liger-ops-vb4", "0.0.1", ("cpu",), name)
    b = type(b)(**{**b.__dict__, "interface_version": "1.0", "ops": {"rms_norm": b.ops["rms_norm"]}})
    validate(b)
    bad = type(b)(**{**b.__dict__, "ops": {"rms_norm": lambda logits, w, e, o, c, i: None}})
    with pytest.raises(LigerBackendError, match=r"expected rms_norm\(x, weight=None"):
        validate(bad)
