"""Every conformance case; a vendor's tests/test_conformance.py star-imports this."""

from liger_core.conformance.cross_entropy import *  # noqa: F403
from liger_core.conformance.dyt import *  # noqa: F403
from liger_core.conformance.fused_add_rms_norm import *  # noqa: F403
from liger_core.conformance.fused_linear_cross_entropy import *  # noqa: F403
from liger_core.conformance.fused_linear_jsd import *  # noqa: F403
from liger_core.conformance.geglu import *  # noqa: F403
from liger_core.conformance.group_norm import *  # noqa: F403
from liger_core.conformance.jsd import *  # noqa: F403
from liger_core.conformance.kl_div import *  # noqa: F403
from liger_core.conformance.layer_norm import *  # noqa: F403
from liger_core.conformance.poly_norm import *  # noqa: F403
from liger_core.conformance.qwen2vl_mrope import *  # noqa: F403
from liger_core.conformance.rms_norm import *  # noqa: F403
from liger_core.conformance.rope import *  # noqa: F403
from liger_core.conformance.softmax import *  # noqa: F403
from liger_core.conformance.sparsemax import *  # noqa: F403
from liger_core.conformance.swiglu import *  # noqa: F403
from liger_core.conformance.tvd import *  # noqa: F403
