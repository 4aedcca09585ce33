"""Formula registry: safe parsing of formula files into entries."""

from .registry import Registry, default_formula_dirs, load_registry
from .schema import Entry

__all__ = ["Entry", "Registry", "default_formula_dirs", "load_file", "load_registry"]


def __getattr__(name: str):
    # the parser needs SymPy; a registry served from the cache does not
    if name == "load_file":
        from .loader import load_file

        return load_file
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
