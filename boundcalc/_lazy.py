"""Deferred imports, so a command loads only what it uses (``boundcalc --help`` needs neither
SymPy nor numpy). Measured with ``python -X importtime``; see benchmarks/README.md."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Callable


class _LazyModule(ModuleType):
    """A module that is imported on first attribute access."""

    def __init__(self, name: str):
        super().__init__(name)
        self.__dict__["_lazy_target"] = None

    def __getattr__(self, attr: str) -> Any:
        target = self.__dict__["_lazy_target"]
        if target is None:
            target = self.__dict__["_lazy_target"] = importlib.import_module(self.__name__)
        return getattr(target, attr)


def lazy_module(name: str) -> Any:
    """``np = lazy_module("numpy")``: ``np.asarray`` imports numpy on first use."""
    return _LazyModule(name)


def lazy_function(module: str, name: str) -> Callable[..., Any]:
    """A stand-in for ``from module import name`` (a callable) that imports on first call."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"Deferred {module}.{name} (imported on first call)."
    return call


def lazy_names(package: str, space: dict[str, Any], where: dict[str, str]
               ) -> Callable[[str], Any]:
    """A package's ``__getattr__`` (PEP 562) for ``where`` (name → submodule relative to
    ``package``): the submodule is imported on the first use of a name, which is then kept in
    the package's namespace ``space``."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        space[name] = value
        return value

    return __getattr__
