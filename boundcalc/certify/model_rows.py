"""The rows of ``certify`` that certify ``model/`` itself, not its Gibbs posterior
(docs/sources/disagreement.md).

Every Gibbs row bounds the random predictor that draws w ∼ N(θ, diag σ_g²) for each input.
With a held-out set, :func:`model_rows` bounds the deployed classifier h = h_θ: it measures on
the held-out rows' texts (their labels are not read) how often h disagrees with its own
posterior draw, at the σ vector of the per-group Gibbs measurement on S
(:func:`boundcalc.measure.data.disagreement.add_disagreement`), writes ``stats_model.json``
(the measure step's ``stats.json`` plus those values; ``stats.json`` is left as it was) and
evaluates the entries of :data:`ENTRIES` on it: R(h) ≤ the Gibbs bound + kl⁻¹(d̂, ln(1/δ_d)/m).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..claim import THROUGH_GIBBS, Claim, Predictor

MODEL_STATS = "stats_model.json"
ENTRIES = ("disagreement_gibbs_groups_mc",)
GIBBS_ROW = "pac_bayes_kl_gaussian_groups_mc"  # the Gibbs row each one starts from
CERTIFIES = THROUGH_GIBBS


def model_rows(out: str | Path, device: Any, *, max_length: int, batch_size: int | None,
               seed: int, test_error: float | None = None, progress: Any = None,
               loaded: Any = None) -> list[dict[str, Any]]:
    """The rows that certify ``out/model`` itself, measured on ``out/test.jsonl`` (texts only)
    against ``out/stats.json`` (module docstring); ``[]`` without a held-out set. A stats file
    without the per-group Gibbs measurement gives one row with ``value`` None and the reason
    (``skipped``), never a number. ``batch_size`` None: sized per device
    (:func:`~boundcalc.measure.data.batch_rows.read_sized`)."""
    import torch

    from ..floor import annotate
    from ..measure.data.dataset_io import Batched
    from ..measure.data.disagreement import add_disagreement
    from .loaded import Loaded
    from ..measure.threads import blas_threads, data_threads
    from ..optimize import optimize
    from ..registry import load_registry
    from ..stats import load_stats

    out = Path(out)
    if not (out / "test.jsonl").exists():
        return []
    stats = load_stats(out / "stats.json")
    if "gibbs_groups" not in stats.provenance:
        return [Claim(e, None, None, "certified", False, Predictor("model", CERTIFIES),
                      "the held-out texts and S", fields={
                          "skipped": "no per-group Gibbs measurement on S (measure with "
                                     "tune_data)"}).row() for e in ENTRIES]
    dev = torch.device(device) if not isinstance(device, torch.device) else device
    loaded = loaded or Loaded(out, dev)
    tm = loaded.model("model")
    rows = loaded.batches("test.jsonl", max_length=max_length, batch_size=batch_size)
    texts_only = Batched([(inputs, None) for inputs, _ in rows.batches], rows.n, rows.seq_len,
                         rows.source, rows.description + ", labels unused", rows.tokens)
    with blas_threads(data_threads(tm.model, dev)):  # as every data-side pass: one thread
        # for a small model on a CPU (two threads on two busy cores took 3× as long)
        got = add_disagreement(stats, tm, texts_only, dev, seed=seed, progress=progress)
    stats.save(out / MODEL_STATS)
    registry = load_registry()
    found = []
    for ident in ENTRIES:
        entry = registry.get(ident)
        r = annotate(optimize(entry, stats, {}, registry=registry, sensitivity=False,
                              contributions=False, what_if=False), entry, stats, test_error)
        conf = {s: float(r.inputs[s]) for s, spec in entry.symbols.items()
                if spec.role == "confidence" and s in r.inputs}
        found.append(Claim.of(
            r, Predictor("model", CERTIFIES), "the held-out texts and S",
            delta_split=conf, terms={k: float(v) for k, v in r.terms.items()},
            test_error=r.test_error, gibbs_row=GIBBS_ROW, disagreements=got.count,
            rows=got.rows, stats=str(out / MODEL_STATS)).row())
    return found
