"""boundcalc: published generalization bounds for Transformers, as honest numbers.

Python API::

    import boundcalc as bc
    reg = bc.load_registry()
    r = bc.evaluate(reg.get("mcallester"), {"emp_risk": 0.05, "KL": 5000, "n": 60000,
                                          "delta": 0.05})
    print(r.value, r.label)
"""

__version__ = "0.1.0"

from .api import compute, prepare  # noqa: E402
from .bind import bind  # noqa: E402
from .errors import BoundcalcError  # noqa: E402
from .evaluation import Prepared, Result, evaluate  # noqa: E402
from .registry import Entry, Registry, load_registry  # noqa: E402
from .stats import Stats, load_stats  # noqa: E402

__all__ = ["bind", "compute", "prepare", "BoundcalcError", "Entry", "Prepared", "Registry", "Result", "Stats", "__version__",
           "evaluate", "load_registry", "load_stats"]
