"""Measurement: checkpoint → layer map → per-matrix, per-head, curvature and data statistics.

Public API::

    from boundcalc.measure import measure
    stats = measure("path/to/model", init="path/to/init", data="data.pt")
    stats.to_dataframe()

Submodules: :mod:`.io` (loading), :mod:`.architectures` (layer maps), :mod:`.spectra` (norms,
fast per-head spectra, Schatten sums), :mod:`.curvature` (Hutchinson, Gaussian perturbation,
Monte Carlo kl bound), :mod:`.subgaussian`, :mod:`.data`, :mod:`.fourier`, :mod:`.device`.
"""

from __future__ import annotations

from .architectures import LayerMap, build_layer_map, format_layer_map
from .curvature import (GibbsRisk, HessianTrace, attach_hessian_trace, hutchinson_trace,
                        monte_carlo_gibbs_risk, param_groups, perturbed)
from .data import DataSample, load_data
from .hutchpp import hutchpp_trace
from .io import TensorSource, open_source
from .pipeline import measure
from .spectra import core_singular_values, numerical_rank, schatten_grid, schatten_sum
from .subgaussian import subgaussian_constant

__all__ = [
    "DataSample", "GibbsRisk", "HessianTrace", "LayerMap", "TensorSource", "attach_hessian_trace",
    "build_layer_map", "core_singular_values", "format_layer_map", "hutchinson_trace", "hutchpp_trace",
    "load_data", "measure", "monte_carlo_gibbs_risk", "numerical_rank", "open_source",
    "param_groups", "perturbed", "schatten_grid", "schatten_sum", "subgaussian_constant",
]
