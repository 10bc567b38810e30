"""The shared conformance suite run against the reference backend (the oracle's sanity)."""

from liger_core.conformance.cases import *  # noqa: F403
