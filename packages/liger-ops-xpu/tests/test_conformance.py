"""The shared liger-core conformance suite against this package's backend."""

import pytest
from liger_core.conformance.cases import *

# Kernel loops must not lean on the interpreter's deprecated array-to-int conversion (an error
# from NumPy 2.4), so that deprecation fails the suite here.
pytestmark = pytest.mark.filterwarnings("error:Conversion of an array with ndim > 0:DeprecationWarning")
