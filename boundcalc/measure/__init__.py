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

from .architectures import LayerMap, build_layer_map, format_layer_map
from .data.curvature import HessianTrace, attach_hessian_trace, hutchinson_trace, param_groups
from .data.gibbs import GibbsRisk, monte_carlo_gibbs_risk, perturbed
from .samples import DataSample, load_data
from .data.hutchpp import hutchpp_trace
from .io import TensorSource, open_source
from .weights.pipeline import measure
from .weights.spectra import core_singular_values, numerical_rank, schatten_grid, schatten_sum
from .subgaussian import subgaussian_constant

__all__ = [
    "DataSample", "GibbsRisk", "HessianTrace", "LayerMap", "TensorSource", "attach_hessian_trace",
    "build_layer_map", "core_singular_values", "format_layer_map", "hutchinson_trace", "hutchpp_trace",
    "load_data", "measure", "monte_carlo_gibbs_risk", "numerical_rank", "open_source",
    "param_groups", "perturbed", "schatten_grid", "schatten_sum", "subgaussian_constant",
]
