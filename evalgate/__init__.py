"""evalgate: prove that a quantized inference server answers like its baseline, or block the rollout."""

__all__ = ["__version__"]
__version__ = "0.1.0"
