"""kiln: the Python layer of the kiln GPU-kernel optimiser (problems, references, capture, install)."""

__version__ = "0.1.0"


def split_script_args(argv: list) -> tuple:
    """(kiln's arguments, the script's): everything after the first `--` belongs to the user's script."""
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, []


def default_backend() -> str:
    """The backend kiln uses here where none is named, "cuda" or "cpu": the C commands' own rule
    (kiln_backend_default: a driver and a visible GPU), asked through libkiln_rt."""
    from kiln.install_runtime import _rt
    return _rt().kiln_rt_default_backend().decode()


# kiln.install(library, model=None) and kiln.uninstall(): python/kiln/install.py (imports torch lazily).
from kiln.install import install, uninstall  # noqa: E402,F401
