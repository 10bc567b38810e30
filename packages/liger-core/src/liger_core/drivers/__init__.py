"""The autograd drivers: one per op family, shared by every vendor.

A driver is the autograd Function of an op (or of a family of ops): it checks the arguments once
(the op module's ``check_args``), lays the tensors out (rows, contiguity, incoming gradients),
applies the in-place policy, saves what backward needs and calls the vendor's kernels through the
family's *kernel protocol*. A vendor package then holds only kernels, their launch plans and its
``hardware`` facts, and registers the driver bound to its kernels::

    # liger_ops_<vendor>/relu_squared.py
    class ReLUSquaredKernels:
        protocol = relu_squared_driver.PROTOCOL
        forward = staticmethod(relu_squared_forward)
        backward = staticmethod(relu_squared_backward)

    LigerReLUSquaredFunction = implements("relu_squared")(
        relu_squared_driver.autograd_function(ReLUSquaredKernels(), __name__)
    )

Each ``drivers/<family>.py`` states its protocol in one place: a ``typing.Protocol`` class naming
the methods a vendor provides, what each receives (the layout the driver guarantees) and returns,
and ``PROTOCOL``, the protocol's version. The version changes when a method's meaning changes; a
vendor built for another version is refused with a clear error when it binds, not wrong at run
time (`check_protocol`).

Hardware state (a plan, the device's facts) is the vendor's business: a kernel method obtains what
it needs from its tensors' device; a forward that must hand state to its backward returns it as an
opaque value the driver saves and passes back.

A vendor keeps a driver of its own only where its strategy truly differs, and says where and why
in its module.

Drivers sit above the op modules (they import ``check_args``); nothing below them imports a driver.
"""

from __future__ import annotations

from liger_core.backend import LigerBackendError


def check_protocol(kernels: object, family: str, version: int) -> None:
    """Refuse ``kernels`` unless it declares ``protocol == version`` of ``family``'s driver."""
    declared = getattr(kernels, "protocol", None)
    if declared != version:
        raise LigerBackendError(
            f"{type(kernels).__module__}.{type(kernels).__qualname__}: kernels for liger_core.drivers.{family} must "
            f"declare protocol = {version} (this liger-core's version of that kernel protocol); got {declared!r}. "
            f"Fix: install matching versions of liger-core and the vendor package"
        )
