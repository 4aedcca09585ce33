"""The language model's yardstick and its subspace Gibbs posterior (``examples/language_model.py``,
issue 50).

* **The baseline**: what holding S out would certify about the prior, with no PAC-Bayes at all.
  The prior is trained on the prior split only and S is drawn from the bound pool by a seeded
  sampler that reads no loss, so S is a held-out set for the prior: ``test_set_kl_bounded``
  (docs/sources/test_set.md §4) on the prior's smoothed log-loss −ln((1−α)p_y + α/V)/ln(V/α)
  per chunk (in [0, 1], the loss every Gibbs row of the example certifies), times log2(V/α):
  bits per predicted byte. Shown beside the certified rows, never one of them.
* **The subspace route** (:mod:`boundcalc.measure.data.subspace`): N(z, s_Q² I) on the
  coordinates of rank-r adapters of every Conv1D of the prior's blocks (the tied head stays
  out), z first fitted on S by the smoothed loss at the mean, then z and s_Q trained on the
  PAC-Bayes bound; its Monte Carlo Gibbs risk on S (fresh per-row draws) is written into
  ``stats.json`` for ``pac_bayes_kl_gaussian_subspace_mc``, which ``boundcalc compare`` then
  evaluates with the other rows. On the held-out chunks (no choice uses them): one Monte Carlo
  pass of the same Gibbs predictor's smoothed bits.

Every setting below is fixed before S is drawn (:class:`SubspaceLM`); the prior std s_P is
declared (free), so the certificate charges nothing for it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BASELINE_DELTA = 0.05  # the baseline's δ, as certify's (claims.TEST_SET_DELTA)


@dataclass(frozen=True)
class SubspaceLM:
    """The subspace posterior's settings for the language model (declared before S)."""

    rank: int = 4
    layers: str = "all"
    sigma_prior: float = 0.05
    fit_epochs: int = 2
    fit_lr: float = 1e-3
    epochs: int = 2
    lr: float = 1e-3
    draws: int = 4  # Monte Carlo passes over S


def baseline(out: Path, alpha: float, vocab: int, device: Any) -> dict[str, Any]:
    """The prior's test-set bound on S (module docstring) in bits per predicted byte, with the
    prior's mean smoothed loss on S it is made of."""
    import boundcalc as bc
    from boundcalc.measure.data.batch_rows import read_sized
    from boundcalc.measure.data.data_pass import run_pass
    from boundcalc.measure.data.hf import load_task_model

    prior = load_task_model(out / "prior", device)
    S = read_sized(str(out / "S.jsonl"), prior, device, max_length=_chunk(out), given=64)
    mean = float(run_pass(prior, S, device, alpha=alpha, norms=False).bounded.mean())
    r = bc.evaluate(bc.load_registry().get("test_set_kl_bounded"),
                    {"mean_loss": mean, "m": S.n, "delta": BASELINE_DELTA})
    to_bits = math.log2(vocab / alpha)
    return {"id": "test_set_kl_bounded", "value": r.value * to_bits, "delta": BASELINE_DELTA,
            "prior_bits_on_S": mean * to_bits, "n": S.n, "alpha": alpha,
            "text": (f"baseline (not claimed): the prior's test-set bound on S "
                     f"(test_set_kl_bounded, δ = {BASELINE_DELTA:g}, its mean smoothed loss "
                     f"{mean * to_bits:.3f} bits on the {S.n} chunks): "
                     f"{r.value * to_bits:.4f} bits per predicted byte")}


def _chunk(out: Path) -> int:
    """The chunk length of the build in ``out`` (its recorded configuration)."""
    import json

    return int(json.loads((out / "splits.json").read_text())["config"]["chunk"])


def subspace_step(out: Path, cfg: Any, vocab: int,
                  settings: SubspaceLM | None = None) -> dict[str, Any]:
    """Train and measure the subspace Gibbs posterior around ``out/prior`` on ``out/S.jsonl``
    (module docstring) of a model with ``vocab`` tokens, add its scalars and record to
    ``out/stats.json`` and return the held-out estimate (bits per predicted byte of one Monte
    Carlo pass)."""
    from boundcalc.measure.data.batch_rows import read_sized
    from boundcalc.measure.data.gibbs import MonteCarlo
    from boundcalc.measure.data.hf import load_task_model
    from boundcalc.measure.data.subspace import SubspaceSpec, gibbs_errors
    from boundcalc.measure.data.subspace_record import RECORD, add_subspace_posterior
    from boundcalc.measure.device import resolve_device
    from boundcalc.measure.threads import blas_threads, data_threads
    from boundcalc.stats import load_stats

    from .stdlib_text import stage

    st = settings or SubspaceLM()
    spec = SubspaceSpec(rank=st.rank, layers=st.layers, sigma_prior=st.sigma_prior,
                        epochs=st.epochs, lr=st.lr, fit_epochs=st.fit_epochs, fit_lr=st.fit_lr,
                        smoothing=cfg.smoothing, seed=cfg.seed)
    spec.check()  # before any model is read
    dev = resolve_device(cfg.device)
    stats = load_stats(out / "stats.json")
    prior = load_task_model(out / "prior", dev)

    def read(name: str) -> Any:
        return read_sized(str(out / name), prior, dev, max_length=cfg.chunk, given=64)

    stage(f"the subspace Gibbs posterior: rank {st.rank} adapters, {st.fit_epochs} fit + "
          f"{st.epochs} bound epochs over S, {st.draws} Monte Carlo passes")
    with blas_threads(data_threads(prior.model, dev)):
        sub, fit = add_subspace_posterior(stats, prior, read("S.jsonl"), dev, spec,
                                          MonteCarlo(st.draws, cfg.seed + 80_000, cfg.smoothing),
                                          prior_source=str(out / "prior"))
        held = gibbs_errors(sub, read("heldout.jsonl"), 1, cfg.seed + 90_000)[0]
    to_bits = math.log2(vocab / cfg.smoothing)
    est = {"chunks": int(held.size), "gibbs_bits": float(held.mean()) * to_bits,
           "gibbs_bits_stderr": float(held.std(ddof=1) / math.sqrt(held.size)) * to_bits,
           "note": "one Monte Carlo pass (one draw per held-out chunk) of the subspace Gibbs "
                   "predictor's smoothed loss, in bits per predicted byte: an estimate for the "
                   "report, no choice uses it"}
    rec = stats.provenance[RECORD]
    rec["held_out"], rec["settings"] = est, asdict(st)
    stats.save(out / "stats.json")
    stage(f"subspace posterior: d = {sub.dim}, ‖z‖² = {float(sub.dist_sq()):.4g}, s_Q = "
          f"{fit.sigma_post:.4g}; {fit.seconds:.0f} s; held-out {est['gibbs_bits']:.3f} bits "
          "per predicted byte (Gibbs, smoothed)")
    return est
