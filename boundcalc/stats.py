"""The stats file: measured model statistics, versioned JSON.

This is the one contract between ``measure`` (which writes it) and the registry (which binds
formula symbols to it). Layout, version 1::

    {
      "schema": "boundcalc.stats", "version": 1,
      "provenance": {"boundcalc": "0.1.0", "torch": "2.13.0", "device": "cpu",
                     "dtype": "float64", "seed": 0, "source": "path/or/name", ...},
      "model": {"architecture": "bert", "n_layers": 6, "n_heads": 12, "n_kv_heads": 12,
                "hidden": 384, "head_dim": 32, "intermediate": 1536, "n_params": 22713216},
      "layer_map": [{"name": "...query.weight", "role": "q", "layer": 0, "head": null,
                     "shape": [384, 384]}, ...],
      "excluded":  [{"name": "...LayerNorm.weight", "reason": "norm parameter"}, ...],
      "matrices":  [{"type": "QK", "layer": 0, "head": 3, "name": "...", "shape": [384, 384],
                     "stats": {"spectral": 1.2, "frobenius": ..., ...},
                     "singular_values": [...]}, ...],
      "scalars":   {"n": {"value": 1000}, "hessian_trace": {"value": 3.1, "estimated": true,
                     "stderr": 0.2, "ci": [2.7, 3.5], "confidence": 0.95,
                     "method": "hutchinson, 100 Rademacher probes"}, ...},
      "groups":    {"names": ["layer.0", ...],
                    "stats": {"hessian_trace": [..], "dist_init_sq": [..], "n_params": [..]},
                    "estimated": {"hessian_trace": true}},
      "curves":    {"gibbs_risk": {"param": "sigma", "at": [0.01, 0.02],
                     "value": [0.12, 0.15], "ci": [[0.10, 0.14], [0.13, 0.17]],
                     "confidence": 0.99, "estimated": true, "n_samples": 1000,
                     "method": "Monte Carlo, 64 draws of N(w, σ²I)"}}
    }

``curves_sha256`` (written with ``curves``) is their content hash; a file is also checked as
a whole on load (:mod:`boundcalc.stats_checks`: counts against the curves they summarise).

``curves`` (optional) holds statistics measured at a few values of a free parameter of the
bounds (the Gibbs risk or the perturbed loss P̂ at each σ where it was measured). A formula may
choose that parameter only among the ``at`` points, paying the union bound over them.

Matrix ``type`` is one of the spectrum-adaptive types ``QK``, ``V`` (Ṽ = V·O per head),
``M_in``, ``M_out`` or a raw role (``q``, ``k``, ``v``, ``o``, ``ffn_in``, ``ffn_out``, ...).
Standard per-matrix stat names: ``spectral``, ``frobenius``, ``nuclear``, ``norm_21`` (sum of
column l2 norms in the stored orientation), ``norm_11``, ``rank`` (numerical), ``stable_rank``,
``dist_init_fro``, ``dist_init_spectral``, ``dist_init_21``.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import StatsError, one_line
from .limits import check_allocation
from .files import check_regular_file, finite_number, read_json

SCHEMA = "boundcalc.stats"
VERSION = 1
_MAX_SV = 1_000_000  # singular values per matrix; larger arrays are refused as hostile
_MAX_INDEX = 1_000_000  # layer / head indices; larger ones are refused as hostile
MAX_FILE_BYTES = 1 << 30
JSON_INFLATION = 16  # worst case: "0," (2 bytes) becomes a float object and a list slot (32)
# relative slack for the consistency checks between norms of one matrix (float32 measurements)
CONSISTENCY_RTOL = 1e-4


@dataclass
class Quantity:
    """A scalar statistic with its provenance.

    ``estimated`` marks a stochastic or heuristic estimate (Hutchinson, Monte Carlo, the
    sub-Gaussian estimator). ``ci`` is a confidence interval at level ``confidence``.
    """

    value: float
    estimated: bool = False
    stderr: float | None = None
    ci: tuple[float, float] | None = None
    confidence: float | None = None
    method: str | None = None
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value}
        if self.estimated:
            out["estimated"] = True
        for key in ("stderr", "confidence", "method", "note"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.ci is not None:
            out["ci"] = [self.ci[0], self.ci[1]]
        return out


@dataclass
class MatrixStats:
    """Statistics of one weight matrix (or per-head product) in a declared orientation."""

    type: str
    layer: int | None
    head: int | None
    name: str
    shape: tuple[int, int]
    stats: dict[str, float] = field(default_factory=dict)
    singular_values: np.ndarray | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.type, "layer": self.layer, "head": self.head, "name": self.name,
            "shape": list(self.shape), "stats": dict(self.stats),
        }
        if self.singular_values is not None:
            out["singular_values"] = [float(x) for x in self.singular_values]
        return out


@dataclass
class Curve:
    """A statistic measured at several values (``at``) of one free parameter (``param``)."""

    param: str
    at: np.ndarray
    value: np.ndarray
    ci: np.ndarray | None = None  # shape (len(at), 2)
    confidence: float | None = None
    estimated: bool = False
    n_samples: int | None = None
    method: str | None = None
    note: str | None = None  # e.g. the quantized model a compression curve was measured on

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"param": self.param, "at": [float(x) for x in self.at],
                               "value": [float(x) for x in self.value]}
        if self.ci is not None:
            out["ci"] = [[float(a), float(b)] for a, b in self.ci]
        if self.estimated:
            out["estimated"] = True
        for key in ("confidence", "n_samples", "method", "note"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


@dataclass
class Stats:
    """All statistics of one model, plus the provenance needed to reproduce them."""

    model: dict[str, Any] = field(default_factory=dict)
    matrices: list[MatrixStats] = field(default_factory=list)
    scalars: dict[str, Quantity] = field(default_factory=dict)
    groups: dict[str, Any] = field(default_factory=dict)
    layer_map: list[dict[str, Any]] = field(default_factory=list)
    excluded: list[dict[str, Any]] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)
    curves: dict[str, Curve] = field(default_factory=dict)

    # ---- queries used by binding -------------------------------------------------------
    def of_type(self, mtype: str) -> list[MatrixStats]:
        return [m for m in self.matrices if m.type == mtype]

    def to_dataframe(self):
        """Per-matrix statistics as a pandas DataFrame (one row per matrix)."""
        import pandas as pd

        rows = []
        for m in self.matrices:
            row = {"type": m.type, "layer": m.layer, "head": m.head, "name": m.name,
                   "rows": m.shape[0], "cols": m.shape[1]}
            row.update(m.stats)
            rows.append(row)
        return pd.DataFrame(rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "version": VERSION,
            "provenance": self.provenance,
            "model": self.model,
            "layer_map": self.layer_map,
            "excluded": self.excluded,
            "matrices": [m.to_json() for m in self.matrices],
            "scalars": {k: q.to_json() for k, q in sorted(self.scalars.items())},
            "groups": self.groups,
            **(self._curves_json() if self.curves else {}),
            **self._learned_json(),
        }

    def _learned_json(self) -> dict[str, Any]:
        from .stats_checks import learned_digest

        scalars = {k: q.to_json() for k, q in self.scalars.items()}
        try:
            digest = learned_digest(scalars, self.provenance)
        except (TypeError, ValueError):  # not JSON (the writer refuses it) or not finite
            return {}
        return {} if digest is None else {"learned_sha256": digest}

    def _curves_json(self) -> dict[str, Any]:
        from .stats_checks import curves_digest

        curves = {k: c.to_json() for k, c in sorted(self.curves.items())}
        try:
            digest = curves_digest(curves)
        except ValueError:  # a non-finite value: write_json_atomic refuses the whole file
            return {"curves": curves}
        return {"curves": curves, "curves_sha256": digest}

    def save(self, path: str | os.PathLike) -> Path:
        """Write atomically: a temporary file in the same folder, then an atomic rename."""
        return write_json_atomic(path, self.to_json())


def write_json_atomic(path: str | os.PathLike, obj: Any) -> Path:
    """Serialize ``obj`` as JSON to ``path`` without ever leaving a half-written file."""
    from .files import write_text_atomic

    try:
        text = json.dumps(obj, indent=1, sort_keys=True, allow_nan=False)
    except ValueError:  # an infinite or NaN statistic: never written as a silent number
        raise StatsError(f"{path}: a statistic is not a finite number; nothing written") from None
    return write_text_atomic(path, text + "\n")


# ---- loading and validation ---------------------------------------------------------------

def _finite(value: Any, what: str, nonneg: bool = False) -> float:
    return finite_number(value, what, StatsError, nonneg)


def _quantity(obj: Any, what: str) -> Quantity:
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        return Quantity(_finite(obj, what))
    if not isinstance(obj, dict) or "value" not in obj:
        raise StatsError(f"{what}: expected a number or an object with a 'value' field")
    ci = obj.get("ci")
    if ci is not None:
        if not isinstance(ci, list) or len(ci) != 2:
            raise StatsError(f"{what}.ci: expected [low, high]")
        ci = (_finite(ci[0], f"{what}.ci[0]"), _finite(ci[1], f"{what}.ci[1]"))
        if ci[0] > ci[1]:
            raise StatsError(f"{what}.ci: low end {ci[0]} is above high end {ci[1]}")
    conf = obj.get("confidence")
    if conf is not None:
        conf = _finite(conf, f"{what}.confidence")
        if not 0 < conf < 1:
            raise StatsError(f"{what}.confidence: expected a number in (0, 1), got {conf}")
    stderr = obj.get("stderr")
    estimated = obj.get("estimated", False)
    if not isinstance(estimated, bool):
        raise StatsError(f"{what}.estimated: expected true or false, got {estimated!r:.40}")
    return Quantity(
        value=_finite(obj["value"], f"{what}.value"),
        estimated=estimated,
        stderr=None if stderr is None else _finite(stderr, f"{what}.stderr", nonneg=True),
        ci=ci,
        confidence=conf,
        method=_opt_str(obj.get("method"), f"{what}.method"),
        note=_opt_str(obj.get("note"), f"{what}.note"),
    )


def _opt_str(value: Any, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise StatsError(f"{what}: expected a string, got {type(value).__name__}")


def _opt_int(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StatsError(f"{what}: expected a non-negative integer or null, got {value!r:.40}")
    if value > _MAX_INDEX:
        raise StatsError(f"{what}: {value} is implausibly large (at most {_MAX_INDEX})")
    return value


def _matrix(obj: Any, i: int) -> MatrixStats:
    what = f"matrices[{i}]"
    if not isinstance(obj, dict):
        raise StatsError(f"{what}: expected an object")
    for key in ("type", "shape", "stats"):
        if key not in obj:
            raise StatsError(f"{what}: missing field '{key}'")
    if not isinstance(obj["type"], str) or not obj["type"]:
        raise StatsError(f"{what}.type: expected a non-empty string")
    shape = obj["shape"]
    if (not isinstance(shape, list) or len(shape) != 2
            or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape)):
        raise StatsError(f"{what}.shape: expected [rows, cols] of positive integers")
    if not isinstance(obj["stats"], dict):
        raise StatsError(f"{what}.stats: expected an object of name -> number")
    stats = {str(k): _finite(v, f"{what}.stats.{k}") for k, v in obj["stats"].items()}
    for k, v in stats.items():
        if v < 0:
            raise StatsError(f"{what}.stats.{k}: norms and ranks cannot be negative, got {v}")
    sv = obj.get("singular_values")
    if sv is not None:
        if not isinstance(sv, list):
            raise StatsError(f"{what}.singular_values: expected a list of numbers")
        if len(sv) > _MAX_SV or len(sv) > min(shape):
            raise StatsError(
                f"{what}.singular_values: {len(sv)} values for a {shape[0]}x{shape[1]} matrix"
            )
        arr = np.array([_finite(x, f"{what}.singular_values[{j}]", nonneg=True)
                        for j, x in enumerate(sv)], dtype=np.float64)
        sv = arr
    name = obj.get("name", "")
    if not isinstance(name, str):
        raise StatsError(f"{what}.name: expected a string")
    _check_consistent(what, stats, sv, shape)
    return MatrixStats(
        type=obj["type"], layer=_opt_int(obj.get("layer"), f"{what}.layer"),
        head=_opt_int(obj.get("head"), f"{what}.head"), name=name,
        shape=(shape[0], shape[1]), stats=stats, singular_values=sv,
    )


def _check_consistent(what: str, stats: dict[str, float], sv: np.ndarray | None,
                      shape: list[int]) -> None:
    """Refuse statistics of one matrix that contradict each other (a hand-edited or corrupted
    file): spectral = σ_max ≤ ‖·‖_F ≤ ‖·‖_*, ‖·‖_F² ≥ Σσ², ‖·‖_* ≥ Σσ, rank ≤ min(shape)."""
    tol = 1 + CONSISTENCY_RTOL
    spec, fro, nuc = stats.get("spectral"), stats.get("frobenius"), stats.get("nuclear")
    facts = []
    if sv is not None and sv.size:
        top = float(sv.max())
        if spec is not None:
            facts.append((top <= spec * tol + 1e-300,
                          f"spectral norm {spec:g} is below the largest singular value {top:g}"))
        if fro is not None:
            facts.append((float(np.sqrt(np.sum(sv ** 2))) <= fro * tol + 1e-300,
                           f"frobenius norm {fro:g} is below √Σσ² of the singular values"))
        if nuc is not None:
            facts.append((float(sv.sum()) <= nuc * tol + 1e-300,
                          f"nuclear norm {nuc:g} is below the sum of the singular values"))
    if spec is not None and fro is not None:
        facts.append((spec <= fro * tol + 1e-300,
                      f"spectral norm {spec:g} exceeds the frobenius norm {fro:g}"))
    if fro is not None and nuc is not None:
        facts.append((fro <= nuc * tol + 1e-300,
                      f"frobenius norm {fro:g} exceeds the nuclear norm {nuc:g}"))
    if "rank" in stats:
        facts.append((stats["rank"] <= min(shape),
                      f"rank {stats['rank']:g} exceeds min(shape) = {min(shape)}"))
    for ok, text in facts:
        if not ok:
            raise StatsError(f"{what}: inconsistent statistics: {text}")


def _curve(obj: Any, what: str) -> Curve:
    if not isinstance(obj, dict):
        raise StatsError(f"{what}: expected an object")
    for key in ("param", "at", "value"):
        if key not in obj:
            raise StatsError(f"{what}: missing field '{key}'")
    param = obj["param"]
    if not isinstance(param, str) or not param.isidentifier():
        raise StatsError(f"{what}.param: expected a parameter name")
    at, value = obj["at"], obj["value"]
    if not isinstance(at, list) or not isinstance(value, list) or not at:
        raise StatsError(f"{what}: 'at' and 'value' must be non-empty lists")
    if len(at) != len(value) or len(at) > _MAX_SV:
        raise StatsError(f"{what}: {len(at)} points in 'at' but {len(value)} values")
    at_arr = np.array([_finite(x, f"{what}.at[{j}]") for j, x in enumerate(at)])
    if len(set(at_arr.tolist())) != len(at_arr):
        raise StatsError(f"{what}.at: repeated points")
    val_arr = np.array([_finite(x, f"{what}.value[{j}]") for j, x in enumerate(value)])
    ci = obj.get("ci")
    ci_arr = None
    if ci is not None:
        if not isinstance(ci, list) or len(ci) != len(at):
            raise StatsError(f"{what}.ci: expected one [low, high] per point")
        rows = []
        for j, pair in enumerate(ci):
            if not isinstance(pair, list) or len(pair) != 2:
                raise StatsError(f"{what}.ci[{j}]: expected [low, high]")
            lo, hi = _finite(pair[0], f"{what}.ci[{j}][0]"), _finite(pair[1], f"{what}.ci[{j}][1]")
            if not lo <= val_arr[j] <= hi:
                raise StatsError(f"{what}.ci[{j}]: [{lo}, {hi}] does not contain the value "
                                 f"{val_arr[j]}")
            rows.append((lo, hi))
        ci_arr = np.array(rows, dtype=np.float64)
    conf = obj.get("confidence")
    if conf is not None:
        conf = _finite(conf, f"{what}.confidence")
        if not 0 < conf < 1:
            raise StatsError(f"{what}.confidence: expected a number in (0, 1), got {conf}")
    estimated = obj.get("estimated", False)
    if not isinstance(estimated, bool):
        raise StatsError(f"{what}.estimated: expected true or false, got {estimated!r:.40}")
    n_samples = obj.get("n_samples")
    if n_samples is not None and (isinstance(n_samples, bool) or not isinstance(n_samples, int)
                                  or n_samples < 1):
        raise StatsError(f"{what}.n_samples: expected a positive integer")
    return Curve(param=param, at=at_arr, value=val_arr, ci=ci_arr, confidence=conf,
                 estimated=estimated, n_samples=n_samples,
                 method=_opt_str(obj.get("method"), f"{what}.method"),
                 note=_opt_str(obj.get("note"), f"{what}.note"))


def stats_from_json(data: Any, source: str = "<stats>") -> Stats:
    """Validate a parsed stats document and build :class:`Stats`; errors name the field."""
    try:
        if not isinstance(data, dict):
            raise StatsError("top level: expected a JSON object")
        if data.get("schema") != SCHEMA:
            raise StatsError(f"field 'schema': expected '{SCHEMA}', got {data.get('schema')!r:.60}")
        version = data.get("version")
        if isinstance(version, bool) or not isinstance(version, int) or version != VERSION:
            raise StatsError(f"field 'version': this boundcalc reads version {VERSION}, "
                             f"got {data.get('version')!r:.20}")
        for key, typ in (("model", dict), ("matrices", list), ("scalars", dict)):
            if key not in data:
                raise StatsError(f"missing field '{key}'")
            if not isinstance(data[key], typ):
                raise StatsError(f"field '{key}': expected a JSON {typ.__name__}")
        model = data["model"]
        for key in ("n_layers", "n_heads", "hidden"):
            if key in model:
                _opt_int(model[key], f"model.{key}")
        for key, value in model.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                _finite(value, f"model.{key}")
        for key, typ in (("layer_map", list), ("excluded", list), ("provenance", dict)):
            if data.get(key) is not None and not isinstance(data[key], typ):
                raise StatsError(f"field '{key}': expected a JSON {typ.__name__}")
        groups = data.get("groups", {}) or {}
        if not isinstance(groups, dict):
            raise StatsError("field 'groups': expected an object")
        if groups:
            names = groups.get("names")
            gstats = groups.get("stats", {})
            if not isinstance(names, list) or not isinstance(gstats, dict):
                raise StatsError("groups: expected 'names' (list) and 'stats' (object)")
            if not all(isinstance(n, str) for n in names):
                raise StatsError("groups.names: expected a list of strings")
            for k, v in gstats.items():
                if not isinstance(v, list) or len(v) != len(names):
                    raise StatsError(f"groups.stats.{k}: expected a list of {len(names)} numbers")
                for j, x in enumerate(v):
                    _finite(x, f"groups.stats.{k}[{j}]")
            est = groups.get("estimated", {})
            if est is None:
                est = {}
            if not isinstance(est, dict) or not all(isinstance(b, bool) for b in est.values()):
                raise StatsError("groups.estimated: expected an object of name -> true/false")
        from .stats_checks import check_digest, check_learned_digest, check_whole

        check_digest(data)
        stats = Stats(
            model=model,
            matrices=[_matrix(m, i) for i, m in enumerate(data["matrices"])],
            scalars={str(k): _quantity(v, f"scalars.{k}") for k, v in data["scalars"].items()},
            groups=groups,
            layer_map=list(data.get("layer_map", []) or []),
            excluded=list(data.get("excluded", []) or []),
            provenance=dict(data.get("provenance", {}) or {}),
            curves=_curves(data.get("curves")),
        )
        check_whole(stats)  # a named contradiction first, then any other edit by its hash
        check_learned_digest(data)
        return stats
    except StatsError as exc:
        raise StatsError(one_line(f"{source}: {exc}")) from None


def _curves(obj: Any) -> dict[str, Curve]:
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise StatsError("field 'curves': expected an object of name -> curve")
    return {str(k): _curve(v, f"curves.{k}") for k, v in obj.items()}


def load_stats(path: str | os.PathLike) -> Stats:
    """Read and validate a stats file. Raises :class:`StatsError` naming the bad field."""
    try:
        return _load_stats(Path(path))
    except StatsError as exc:
        raise StatsError(one_line(str(exc))) from None


def _load_stats(p: Path) -> Stats:
    if not os.path.lexists(p):
        raise StatsError(f"{p}: no such stats file")
    st = check_regular_file(p, StatsError, "stats file")
    from .files.atomic_write import note_input

    note_input(p)  # an output of the same run never replaces it
    # parsed JSON takes several times its text in memory: refuse up front what cannot fit
    check_allocation(JSON_INFLATION * st.st_size, f"{p}: stats file of {st.st_size} bytes")
    data = read_json(p, min(MAX_FILE_BYTES, st.st_size + 1), StatsError, "stats file")
    return stats_from_json(data, source=str(p))


def _reject_constant(name: str) -> float:
    raise ValueError(f"non-finite constant {name} is not allowed")
