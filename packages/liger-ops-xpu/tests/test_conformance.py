"""The shared liger-core conformance suite (generated from the op declarations) against this
package's backend."""

from liger_core.conformance.cases import *
