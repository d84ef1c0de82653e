"""kiln: the Python layer of the kiln GPU-kernel optimiser (problems, references, capture, install)."""

__version__ = "0.1.0"
