"""Drop-in `torch.nn.Module` classes over the functional API."""

from liger_core.nn.activation import LigerReLUSquared
from liger_core.nn.attention import (
    LigerFusedNeighborhoodAttention,
    LigerFusedNeighborhoodAttentionLayer,
    LigerMultiTokenAttention,
)
from liger_core.nn.distillation import (
    LigerFusedLinearCosineSimilarityLoss,
    LigerFusedLinearJSDLoss,
    LigerFusedLinearKLDivLoss,
)
from liger_core.nn.dyt import LigerDyT
from liger_core.nn.embedding import LigerEmbedding
from liger_core.nn.group_norm import LigerGroupNorm
from liger_core.nn.grpo import LigerFusedLinearGRPOLoss
from liger_core.nn.kto import LigerFusedLinearKTOLoss
from liger_core.nn.layer_norm import LigerLayerNorm
from liger_core.nn.losses import (
    LigerCrossEntropyLoss,
    LigerFusedCETVDLoss,
    LigerFusedLinearCPOLoss,
    LigerFusedLinearCrossEntropyLoss,
    LigerFusedLinearDPOLoss,
    LigerFusedLinearJSD,
    LigerFusedLinearORPOLoss,
    LigerFusedLinearSimPOLoss,
    LigerJSD,
    LigerKLDIVLoss,
    LigerTVDLoss,
    LigerVocabParallelCrossEntropy,
)
from liger_core.nn.mhc import LigerMHC
from liger_core.nn.mlp import (
    LigerGEGLUMLP,
    LigerPhi3SwiGLUMLP,
    LigerSwiGLUMLP,
    LigerTiledGEGLUMLP,
    LigerTiledSwiGLUMLP,
)
from liger_core.nn.moe import LigerExperts
from liger_core.nn.poly_norm import LigerPolyNorm
from liger_core.nn.rms_norm import LigerFusedAddRMSNorm, LigerModulatedRMSNorm, LigerRMSNorm
from liger_core.nn.softmax import LigerSoftmax, LigerSparsemax

__all__ = sorted(name for name in dir() if name.startswith("Liger"))
