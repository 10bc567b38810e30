"""The liger-core conformance suite, generated from the ops' declarations, against this
package's backend."""

from liger_core.conformance.cases import *
