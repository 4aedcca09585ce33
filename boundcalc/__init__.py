"""boundcalc: published generalization bounds for Transformers, as honest numbers.

Python API::

    import boundcalc as bc
    reg = bc.load_registry()
    r = bc.evaluate(reg.get("mcallester"), {"emp_risk": 0.05, "KL": 5000, "n": 60000,
                                          "delta": 0.05})
    print(r.value, r.label)
"""

__version__ = "0.1.0"

# Deferred (PEP 562): ``import boundcalc`` and the CLI's ``--help`` do not pay for SymPy.
# ``boundcalc.bind`` is the function; its module is ``boundcalc.binding`` (no module of the same
# name can replace the function when it is imported).
_EXPORTS = {"compute": "api", "prepare": "api", "bind": "binding", "BoundcalcError": "errors",
            "Prepared": "evaluation", "Result": "evaluation", "evaluate": "evaluation",
            "Entry": "registry", "Registry": "registry", "load_registry": "registry",
            "Stats": "stats", "load_stats": "stats"}


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = ["bind", "compute", "prepare", "BoundcalcError", "Entry", "Prepared", "Registry", "Result", "Stats", "__version__",
           "evaluate", "load_registry", "load_stats"]
