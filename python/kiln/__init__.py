"""kiln: the Python layer of the kiln GPU-kernel optimiser (problems, references, capture, install)."""

__version__ = "0.1.0"

# kiln.install(library, model=None) and kiln.uninstall(): python/kiln/install.py (imports torch lazily).
from kiln.install import install, uninstall  # noqa: E402,F401
