"""The shared liger-core conformance suite against this package's backend."""

from liger_core.conformance.cases import *
