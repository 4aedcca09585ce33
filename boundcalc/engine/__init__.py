"""Expression layer: formula trees (:mod:`.tree`), their signed-log evaluation (:mod:`.compile`),
interval enclosure (:mod:`.interval`) and the special functions (:mod:`.functions`, whose
numeric kernels are :mod:`.kernels`). Names are resolved on first use, so the numeric engine
does not import SymPy."""

_EXPORTS = {"GridMin": "functions", "kl": "functions", "kl_inv": "functions",
            "kl_bernoulli": "kernels", "kl_inv_upper": "kernels"}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
