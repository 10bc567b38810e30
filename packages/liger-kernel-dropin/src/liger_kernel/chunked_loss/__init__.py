"""``liger_kernel.chunked_loss``: liger-kernel's chunked (fused linear) loss modules, liger-core's classes."""

from __future__ import annotations

from liger_core.nn import (
    LigerFusedLinearCosineSimilarityLoss,
    LigerFusedLinearCPOLoss,
    LigerFusedLinearDPOLoss,
    LigerFusedLinearGRPOLoss,
    LigerFusedLinearJSDLoss,
    LigerFusedLinearKTOLoss,
    LigerFusedLinearORPOLoss,
    LigerFusedLinearSimPOLoss,
)


def __getattr__(name: str):
    from liger_kernel._surface import missing

    raise missing(__name__, name)


__all__ = [
    "LigerFusedLinearCPOLoss",
    "LigerFusedLinearCosineSimilarityLoss",
    "LigerFusedLinearDPOLoss",
    "LigerFusedLinearGRPOLoss",
    "LigerFusedLinearJSDLoss",
    "LigerFusedLinearKTOLoss",
    "LigerFusedLinearORPOLoss",
    "LigerFusedLinearSimPOLoss",
]
