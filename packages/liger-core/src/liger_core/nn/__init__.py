"""Drop-in `torch.nn.Module`s over the functional API."""

from liger_core.nn.rms_norm import LigerRMSNorm

__all__ = ["LigerRMSNorm"]
