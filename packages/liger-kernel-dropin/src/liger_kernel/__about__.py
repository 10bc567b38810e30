# This distribution's own version (liger-kernel-dropin), not liger-kernel's. It starts at 0.9.0 so that
# version checks written for liger-kernel (transformers' is_liger_kernel_available wants >= 0.3.0) pass.
__version__ = "0.9.0"
