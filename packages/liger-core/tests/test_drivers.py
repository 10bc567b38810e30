"""The drivers of `liger_core.drivers` refuse kernels built for another protocol version.

Other families append their own blocks; each block names its driver module.
"""

from __future__ import annotations

import pytest

from liger_core.backend import LigerBackendError

# -- cross_entropy, fused_linear_cross_entropy, vocab_parallel_cross_entropy -----------------


class _KernelsOfAnotherVersion:
    protocol = 0


@pytest.mark.parametrize(
    "family",
    [
        "cross_entropy",
        "fused_linear_cross_entropy",
        "fused_linear_scaled_cross_entropy",
        "vocab_parallel_cross_entropy",
    ],
)
def test_cross_entropy_drivers_refuse_another_protocol(family):
    import importlib

    driver = importlib.import_module(f"liger_core.drivers.{family}")
    with pytest.raises(
        LigerBackendError, match=rf"liger_core\.drivers\.{family} must declare protocol = {driver.PROTOCOL}"
    ):
        driver.autograd_function(_KernelsOfAnotherVersion(), __name__)
