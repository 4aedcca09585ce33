"""Formula registry: safe parsing of formula files into entries."""

from .loader import load_file
from .registry import Registry, default_formula_dirs, load_registry
from .schema import Entry

__all__ = ["Entry", "Registry", "default_formula_dirs", "load_file", "load_registry"]
