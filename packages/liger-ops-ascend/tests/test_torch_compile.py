"""`liger_core.compile` under torch.compile against this package's backend (`liger_core.conformance.compiled`)."""

from liger_core.conformance.compiled import *
