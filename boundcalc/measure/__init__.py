"""Measurement: checkpoint → layer map → per-matrix, per-head, curvature and data statistics.

Public API::

    from boundcalc.measure import measure
    stats = measure("path/to/model", init="path/to/init", data="data.pt")
    stats.to_dataframe()

Rooms (each imports only the ones before it): the base modules (:mod:`.io` loading,
:mod:`.architectures` layer maps, :mod:`.samples` input arrays, :mod:`.safety`, :mod:`.device`,
:mod:`.threads`, :mod:`.subgaussian`, :mod:`.fourier`); :mod:`.weights` (spectra, norms, the
weights pipeline); :mod:`.data` (task models and data sets, the data pass, Monte Carlo Gibbs risk,
Hessian traces); :mod:`.compress` (quantization and code lengths).
"""

from __future__ import annotations

from typing import Any

from .._lazy import lazy_names

# name → the module that defines it; imported on first use (PEP 562), so that reading the
# declarations of ``measure``'s options (``data/options.py``) loads no torch
_WHERE = {
    "LayerMap": "architectures", "build_layer_map": "architectures",
    "format_layer_map": "architectures",
    "HessianTrace": "data.curvature", "attach_hessian_trace": "data.curvature",
    "hutchinson_trace": "data.curvature", "param_groups": "data.curvature",
    "GibbsRisk": "data.gibbs", "monte_carlo_gibbs_risk": "data.gibbs", "perturbed": "data.gibbs",
    "DataSample": "samples", "load_data": "samples",
    "hutchpp_trace": "data.hutchpp",
    "TensorSource": "io", "open_source": "io",
    "measure": "weights.pipeline",
    "core_singular_values": "weights.spectra", "numerical_rank": "weights.spectra",
    "schatten_grid": "weights.spectra", "schatten_sum": "weights.spectra",
    "subgaussian_constant": "subgaussian",
}
__all__ = sorted(_WHERE)


__getattr__ = lazy_names(__name__, globals(), _WHERE)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
