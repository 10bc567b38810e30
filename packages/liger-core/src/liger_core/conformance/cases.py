"""Every conformance case; a vendor's tests/test_conformance.py star-imports this."""

from liger_core.conformance.rms_norm import *  # noqa: F403
