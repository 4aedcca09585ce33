"""A stats file checked as a whole on load: its counts agree with the curves and records they
summarise, and its measured curves are the ones ``measure`` wrote.

:func:`check_whole` (called by :func:`boundcalc.stats.stats_from_json`) refuses, with one line
naming the fields, a file in which

* ``scalars.gibbs_draws`` is not the ``n_samples`` of ``curves.gibbs_risk_mean`` (the N of the
  Monte Carlo step), or N is not a whole number of ``scalars.gibbs_passes`` (whole mode: N is
  the number of passes);
* ``scalars.gibbs_groups_units``, ``curves.gibbs_risk_groups.n_samples`` and
  ``provenance.gibbs_groups.mc.units`` disagree, or the units are not what the record's passes
  and rows give (sample mode: passes × rows per pass; chunk mode: passes × rows / rows per unit;
  whole mode: passes);
* ``scalars.n`` is not ``provenance.data_rows`` (the rows the data side read);
* ``provenance.gibbs_groups`` says the shape ρ is free (``shape_disjoint_from_S``) while the same
  record says it was chosen on S (no ``tune_data``, ``shape_chosen_on`` S itself, or rows of S
  in the tune data);
* the recorded σ_g are not ``scale · ρ_g``, or the scale is not the curve's point;
* ``provenance.gibbs_sigma`` says the isotropic σ was chosen off S (``disjoint_from_S``) while
  ``curves.gibbs_risk_mean`` holds another point or several, or the record names no tune split
  free of S's rows;
* ``curves.disagreement_groups`` (docs/sources/disagreement.md) is not a whole count of its
  ``n_samples`` rows, disagrees with ``scalars.disagreement_rows`` or
  ``provenance.disagreement_groups``, or was measured at another scale or σ vector than the
  per-group Gibbs risk on S.

``curves_sha256`` (written by :meth:`boundcalc.stats.Stats.to_json` whenever there are curves)
is the SHA-256 of the curves as JSON (:func:`curves_digest`); a file whose curves do not match
it was edited after it was written and is refused; ``learned_sha256`` does the same for the
bound-trained posterior's record with ``scalars.n`` (:func:`learned_digest`: what its
certificate reads outside the curves). A file without them (written before the hash
existed, or by hand) is read as before, with the consistency checks above.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from .errors import StatsError
from .files import as_finite_float

REL = 1e-9


def curves_digest(curves: Any) -> str:
    """SHA-256 (hex) of the curves as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(curves, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_digest(data: dict[str, Any]) -> None:
    """Refuse curves that do not match the file's ``curves_sha256`` (when it has one)."""
    want = data.get("curves_sha256")
    if want is None:
        return
    if not isinstance(want, str):
        raise StatsError("curves_sha256: expected a hex string")
    if curves_digest(data.get("curves") or {}) != want:
        raise StatsError("curves_sha256 does not match the curves: they were changed after "
                         "`boundcalc measure` wrote them; measure again")


# what the bound-trained posterior's certificate reads besides the curves, hashed as one
# record when the file has that posterior (``learned_sha256``): its record, the size of S
LEARNED = "gibbs_learned"


def learned_digest(scalars: Any, provenance: Any) -> str | None:
    """SHA-256 (hex) of the bound-trained posterior's record ``provenance.gibbs_learned``
    with ``scalars.n`` and ``provenance.data_rows`` (the JSON forms), or None without that
    record: μ's distances, σ_Q, the grid, the Monte Carlo counts and n, which no curve holds."""
    if not isinstance(provenance, dict) or LEARNED not in provenance:
        return None
    n = scalars.get("n") if isinstance(scalars, dict) else None
    return curves_digest({"n": n, "data_rows": provenance.get("data_rows"),
                          LEARNED: provenance[LEARNED]})


def check_learned_digest(data: dict[str, Any]) -> None:
    """Refuse a bound-trained run's file whose record or n was changed after it was written
    (when it has ``learned_sha256``); a file with the record but without the hash (written
    before it existed, or by hand) is read with the consistency checks alone."""
    want = data.get("learned_sha256")
    if want is None:
        return
    try:
        got = learned_digest(data.get("scalars"), data.get("provenance"))
    except ValueError:  # a non-finite number: changed, since a written file has none
        got = None
    if got != want:
        raise StatsError(f"learned_sha256 does not match provenance.{LEARNED}, scalars.n and "
                         "provenance.data_rows: the bound-trained posterior's record or the "
                         "size of S was changed after it was written; measure again")


def _int(x: Any) -> int | None:
    """A whole number a record gives, else None (a count beyond 2**53 is no count: a float
    cannot hold it, and 10**400 must not reach float())."""
    f = as_finite_float(x)
    if f is None or f != int(f) or abs(f) > 2**53:
        return None
    return int(x)


def _scalar(stats: Any, name: str) -> int | float | None:
    q = stats.scalars.get(name)
    return None if q is None else q.value


def check_whole(stats: Any) -> None:
    """Refuse a stats file whose counts contradict its curves and records (module docs)."""
    _check_n(stats)
    _check_gibbs_mean(stats)
    _check_groups(stats)
    _check_groups(stats, "gibbs_learned", "gibbs_risk_learned", "gibbs_learned_units")
    _check_disagreement(stats)
    _check_sigma_off_sample(stats)


def _check_n(stats: Any) -> None:
    """``scalars.n`` is the number of rows the data side read (``provenance.data_rows``)."""
    n, rows = _scalar(stats, "n"), stats.provenance.get("data_rows")
    if n is not None and rows is not None and as_finite_float(rows) != n:
        raise StatsError(f"scalars.n = {n:g} but provenance.data_rows = {rows!r:.30}: the data "
                         "side read another number of rows than n says")


def _check_gibbs_mean(stats: Any) -> None:
    curve = stats.curves.get("gibbs_risk_mean")
    N = curve.n_samples if curve is not None else None
    draws = _scalar(stats, "gibbs_draws")
    if N is not None and draws is not None and draws != N:
        raise StatsError(f"scalars.gibbs_draws = {draws:g} but curves.gibbs_risk_mean holds "
                         f"N = {N} Monte Carlo losses (n_samples): the counts contradict each "
                         "other")
    passes = _scalar(stats, "gibbs_passes")
    if N is None or passes is None:
        return
    p = _int(passes)
    mode = stats.provenance.get("gibbs_mode")
    if p is None or p < 1 or N % p or (mode == "whole" and N != p):
        raise StatsError(f"scalars.gibbs_passes = {passes:g} does not divide into the N = {N} "
                         f"losses of curves.gibbs_risk_mean ({mode or '?'} mode)")


def _check_sigma_off_sample(stats: Any) -> None:
    """An isotropic σ said to be chosen off S (``provenance.gibbs_sigma.disjoint_from_S``) is
    free only as the one point of ``curves.gibbs_risk_mean``, chosen on a tune split that
    shares no row with S."""
    rec = stats.provenance.get("gibbs_sigma")
    if not isinstance(rec, dict) or rec.get("disjoint_from_S") is not True:
        return
    curve = stats.curves.get("gibbs_risk_mean")
    sigma = as_finite_float(rec.get("sigma"))
    tune, shared = rec.get("tune_data"), rec.get("tune_shared_rows")
    if not isinstance(tune, str) or not tune or shared != 0:
        raise StatsError(f"provenance.gibbs_sigma: disjoint_from_S is true, but the same record "
                         f"names no tune split shared by no row of S (tune_data {tune!r:.60}, "
                         f"tune_shared_rows {shared!r:.20})")
    if curve is None or len(curve.at) != 1 or sigma is None or \
            not math.isclose(float(curve.at[0]), sigma, rel_tol=REL):
        at = [] if curve is None else [float(x) for x in curve.at][:4]
        raise StatsError(f"provenance.gibbs_sigma: σ = {rec.get('sigma')!r:.20} chosen off S is "
                         f"free only as the one point of curves.gibbs_risk_mean, which holds "
                         f"{at}")


def _check_groups(stats: Any, name: str = "gibbs_groups", curve_name: str = "gibbs_risk_groups",
                  units_name: str = "gibbs_groups_units") -> None:
    """The per-group Gaussian posterior's record, curve and count (or, with the other names,
    the bound-trained posterior's: ``provenance.gibbs_learned``, ``gibbs_risk_learned``)."""
    rec = stats.provenance.get(name)
    curve = stats.curves.get(curve_name)
    units = _scalar(stats, units_name)
    N = curve.n_samples if curve is not None else None
    if N is not None and units is not None and units != N:
        raise StatsError(f"scalars.{units_name} = {units:g} but curves.{curve_name} "
                         f"holds N = {N} Monte Carlo losses (n_samples): the counts contradict "
                         "each other")
    if not isinstance(rec, dict):
        return
    mc = rec.get("mc")
    if isinstance(mc, dict) and N is not None:
        _check_units(mc, N, name, curve_name)
    if rec.get("shape_disjoint_from_S") is True:
        where = str(rec.get("shape_chosen_on", ""))
        tune = rec.get("tune_data")
        shared = rec.get("tune_shared_rows")
        if not isinstance(tune, str) or not tune or where.startswith("S ") \
                or (shared not in (None, 0)):
            raise StatsError(f"provenance.{name}: shape_disjoint_from_S is true, but the "
                             f"same record says the shape was chosen on S (tune_data {tune!r:.60}"
                             f", shape_chosen_on {where[:60]!r}, tune_shared_rows {shared!r:.20})")
    if name == "gibbs_groups":
        _check_sigma(rec, curve)
    elif curve is not None and len(curve.at) == 1 and \
            as_finite_float(rec.get("scale")) != float(curve.at[0]):
        raise StatsError(f"provenance.{name}.scale = {rec.get('scale')!r:.30} but the curve "
                         f"{curve_name} was measured at {float(curve.at[0]):g}")


def _check_units(mc: dict[str, Any], N: int, name: str = "gibbs_groups",
                 curve_name: str = "gibbs_risk_groups") -> None:
    mode, passes = mc.get("mode"), _int(mc.get("passes"))
    rows, per_unit = _int(mc.get("samples_per_pass")), _int(mc.get("rows_per_unit"))
    recorded = mc.get("units")
    if recorded is not None and recorded != N:
        raise StatsError(f"provenance.{name}.mc.units = {recorded!r:.30} but "
                         f"curves.{curve_name} holds N = {N} losses")
    if passes is None or passes < 1:
        raise StatsError(f"provenance.{name}.mc.passes: expected a positive integer "
                         f"(at most 2**53), got {mc.get('passes')!r:.30}")
    counts = {"samples_per_pass": rows, "rows_per_unit": per_unit}
    for key in {"sample": ("samples_per_pass",),
                "chunk": ("samples_per_pass", "rows_per_unit")}.get(mode, ()):
        if counts[key] is None or counts[key] < 1:
            raise StatsError(f"provenance.{name}.mc.{key}: expected a positive integer "
                             f"(at most 2**53), got {mc.get(key)!r:.30}")
    if mode == "sample":
        expect, how = passes * rows, f"{passes} passes × {rows} rows"
    elif mode == "chunk":
        expect = passes * (rows // per_unit) if rows % per_unit == 0 else None
        how = f"{passes} passes × {rows} rows / {per_unit} rows per unit"
    elif mode == "whole":
        expect, how = passes, f"{passes} passes, one loss each"
    else:
        raise StatsError(f"provenance.{name}.mc.mode: expected sample, chunk or whole, got "
                         f"{mode!r:.30}")
    if expect != N:
        raise StatsError(f"provenance.{name}.mc: {how} give {expect} losses, but the curve "
                         f"{curve_name} and its count say N = {N}")


def _check_sigma(rec: dict[str, Any], curve: Any) -> None:
    shape, sigma, scale = rec.get("shape"), rec.get("sigma"), rec.get("scale")
    if not isinstance(shape, list) or not isinstance(sigma, list) or \
            isinstance(scale, bool) or not isinstance(scale, (int, float)):
        return  # an older or partial record: the evaluator checks what it uses
    scale = as_finite_float(scale)
    if scale is None:
        raise StatsError("provenance.gibbs_groups.scale: expected a finite number, got "
                         f"{rec.get('scale')!r:.30}")
    if len(shape) != len(sigma):
        raise StatsError(f"provenance.gibbs_groups: {len(shape)} shape values but "
                         f"{len(sigma)} σ_g")
    for g, (r, s) in enumerate(zip(shape, sigma)):
        rf, sf = as_finite_float(r), as_finite_float(s)
        if rf is None or sf is None or not math.isclose(sf, scale * rf, rel_tol=REL, abs_tol=0):
            raise StatsError(f"provenance.gibbs_groups: shape[{g}] = ρ = {r!r:.20} does not match "
                             f"the recorded σ_g = {s!r:.20} = scale {scale:g} · ρ_g")
    if curve is not None and len(curve.at) == 1 and \
            not math.isclose(float(curve.at[0]), scale, rel_tol=REL, abs_tol=0):
        raise StatsError(f"provenance.gibbs_groups.scale = {scale:g} but the curve "
                         f"gibbs_risk_groups was measured at {float(curve.at[0]):g}")


def _check_disagreement(stats: Any) -> None:
    curve = stats.curves.get("disagreement_groups")
    if curve is None:
        return
    m = curve.n_samples
    if m is None or m < 1 or len(curve.at) != 1:
        raise StatsError("curves.disagreement_groups: expected one point and n_samples ≥ 1 "
                         f"rows, got {len(curve.at)} point(s) and n_samples {m!r:.20}")
    count = float(curve.value[0]) * m
    rec = stats.provenance.get("disagreement_groups")
    rec = rec if isinstance(rec, dict) else {}
    checks = [("scalars.disagreement_rows", _scalar(stats, "disagreement_rows"), m),
              ("provenance.disagreement_groups.rows", rec.get("rows"), m),
              ("provenance.disagreement_groups.disagreements", rec.get("disagreements"),
               round(count))]
    wrong = [f"{k} = {v!r:.20}" for k, v, want in checks
             if v is not None and as_finite_float(v) != want]
    if abs(count - round(count)) > 1e-6 or wrong:
        raise StatsError(f"curves.disagreement_groups: D̂ = {curve.value[0]!r:.20} over "
                         f"n_samples = {m} rows is not a whole count of disagreements, or "
                         f"contradicts {', '.join(wrong) or 'nothing'}")
    gibbs = stats.curves.get("gibbs_risk_groups")
    groups = stats.provenance.get("gibbs_groups")
    sigma = groups.get("sigma") if isinstance(groups, dict) else None
    if gibbs is None or len(gibbs.at) != 1 or not math.isclose(
            float(gibbs.at[0]), float(curve.at[0]), rel_tol=REL, abs_tol=0) or (
            "sigma" in rec and rec["sigma"] != sigma):
        raise StatsError("curves.disagreement_groups was not measured at the scale and σ vector "
                         "of the per-group Gibbs risk on S (curves.gibbs_risk_groups, "
                         "provenance.gibbs_groups.sigma)")
