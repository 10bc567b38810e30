"""The drivers refuse kernels built for another version of their kernel protocol."""

from __future__ import annotations

import pytest

from liger_core.backend import LigerBackendError

# -- misc family: mhc, attn_res, multi_token_attention, fused_neighborhood_attention, fused_moe --


class _StaleKernels:
    protocol = 0  # no driver's version


def _refused(bind, family: str, version: int) -> None:
    with pytest.raises(LigerBackendError, match=rf"liger_core\.drivers\.{family} must declare protocol = {version}\b"):
        bind(_StaleKernels(), "some_vendor.module")


def test_mhc_driver_refuses_another_protocol():
    from liger_core.drivers import mhc

    _refused(mhc.autograd_functions, "mhc", mhc.PROTOCOL)


def test_attn_res_driver_refuses_another_protocol():
    from liger_core.drivers import attn_res

    _refused(attn_res.autograd_function, "attn_res", attn_res.PROTOCOL)


def test_multi_token_attention_driver_refuses_another_protocol():
    from liger_core.drivers import multi_token_attention

    _refused(multi_token_attention.autograd_function, "multi_token_attention", multi_token_attention.PROTOCOL)


def test_fused_neighborhood_attention_driver_refuses_another_protocol():
    from liger_core.drivers import fused_neighborhood_attention

    _refused(
        fused_neighborhood_attention.autograd_function,
        "fused_neighborhood_attention",
        fused_neighborhood_attention.PROTOCOL,
    )


def test_fused_moe_driver_refuses_another_protocol():
    from liger_core.drivers import fused_moe

    _refused(fused_moe.autograd_functions, "fused_moe", fused_moe.PROTOCOL)
