"""toolwatch: online tool-call regression detection for AI agents."""

__all__ = ["__version__"]

__version__ = "0.1.0"
