"""The autograd drivers (`liger_core.drivers`): each refuses kernels built for another version of
its kernel protocol, naming the version it expects. Helpers append their drivers' checks here, one
clearly named block per driver module."""

from __future__ import annotations

import pytest

from liger_core.backend import LigerBackendError


class _Kernels:
    """A kernels object declaring ``protocol``; the drivers refuse it before reading any method."""

    def __init__(self, protocol):
        self.protocol = protocol


# -- divergence, fused_linear_jsd, fused_linear_kl_div, grpo_loss (helper "div") -------------------


def _refused(build, family, version):
    with pytest.raises(LigerBackendError, match=rf"liger_core\.drivers\.{family} must declare protocol = {version}\b"):
        build(_Kernels(version + 1), "some_vendor.module")
    with pytest.raises(LigerBackendError, match=rf"protocol = {version}\b.*got None"):
        build(object(), "some_vendor.module")


def test_divergence_driver_refuses_another_protocol():
    from liger_core.drivers import divergence

    _refused(divergence.autograd_functions, "divergence", divergence.PROTOCOL)
    _refused(divergence.fused_ce_tvd_function, "divergence", divergence.PROTOCOL)
    functions = divergence.autograd_functions(_Kernels(divergence.PROTOCOL), "some_vendor.module")
    assert {name: f.__name__ for name, f in functions.items()} == {
        "kl_div": "LigerKLDivFunction",
        "jsd": "LigerJSDFunction",
        "tvd": "LigerTVDFunction",
    }
    assert all(f.__module__ == "some_vendor.module" for f in functions.values())


def test_fused_linear_jsd_driver_refuses_another_protocol():
    from liger_core.drivers import fused_linear_jsd

    _refused(fused_linear_jsd.autograd_function, "fused_linear_jsd", fused_linear_jsd.PROTOCOL)


def test_fused_linear_kl_div_driver_refuses_another_protocol():
    from liger_core.drivers import fused_linear_kl_div

    _refused(fused_linear_kl_div.autograd_function, "fused_linear_kl_div", fused_linear_kl_div.PROTOCOL)


def test_grpo_loss_driver_refuses_another_protocol():
    from liger_core.drivers import grpo_loss

    _refused(grpo_loss.autograd_function, "grpo_loss", grpo_loss.PROTOCOL)
    function = grpo_loss.autograd_function(_Kernels(grpo_loss.PROTOCOL), "some_vendor.module")
    assert (function.__name__, function.__module__) == ("LigerGRPOLossFunction", "some_vendor.module")
