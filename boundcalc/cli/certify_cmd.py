"""``boundcalc certify``: base model + labelled data → a certificate for the model it trains."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from ..certify.config import CertifyConfig
from .app import app, console, emit_json, guarded
from .progress import Stages, check_device, require_paths
from ..options import refuse_unused
from .record_options import given_on_command_line, takes


@app.command("certify")
@takes(CertifyConfig)
def certify_cmd(
    ctx: typer.Context,
    base: str = typer.Argument(..., help="the base model: a Hugging Face folder (pretrained, "
                               "with or without a task head), or a folder / config.json with "
                               "a config only (a random initialisation)"),
    data: str = typer.Option(..., "--data", help="labelled data: CSV, JSON Lines, Parquet or "
                             "a datasets.save_to_disk folder; split into the prior's data and "
                             "the bound sample S"),
    test_data: Optional[str] = typer.Option(None, "--test-data", help="a held-out labelled "
                                            "set (same columns): model/'s test-set bound, and "
                                            "the held-out errors of model/ and of the Gibbs "
                                            "predictor; never used otherwise"),
    out: Path = typer.Option(Path("out/certify"), "-o", "--out", help="output folder: the "
                             "splits, prior/, model/, stats.json, report.json; new or empty, "
                             "or an earlier run's, which resumes from what it wrote"),
    as_json: bool = typer.Option(False, "--json", help="print report.json instead of tables"),
    values: dict = None,  # the CertifyConfig fields, from their declarations (takes)
) -> None:
    """Certify the model this command trains: split DATA (a seeded permutation that reads no
    label) into the prior's data and the bound sample S, fine-tune BASE on the prior's data
    (the prior), fine-tune the prior on S with a proximal pull (the model), then measure with
    --init prior --tune-data and compare.

    The PAC-Bayes rows certify the Gibbs predictor of model/ (each input answered by its own
    draw w ~ N(model/, sigma^2)), not model/; with --test-data, the test-set bound certifies
    model/ itself. The prior's test-set bound on S is shown beside them as the baseline (not
    claimed). All on the distribution DATA's rows were drawn from.
    To certify a model you trained yourself, use `boundcalc holdout MODEL --test-data HELDOUT`
    (the test-set bound on rows it never saw), or `boundcalc measure` with a checkpoint that
    never saw S as --init (see the guide).

    Every step writes its output to the output folder and is reused on a re-run with the same
    inputs and settings: a killed run resumes.
    """

    def run() -> None:
        cfg = CertifyConfig(**values[CertifyConfig])  # every value checked, before anything slow
        refuse_unused(cfg, given_on_command_line(ctx, values[CertifyConfig]))
        require_paths(model=base, data=data, test_data=test_data, tokenizer=cfg.tokenizer)
        check_device(cfg.device)  # before transformers and the model
        stages = Stages("certify")
        from ..certify import certify

        progress = stages.measure_progress("", verb="progress")
        if progress is True:  # a terminal: one line rewritten in place
            progress = _terminal_progress
        result = certify(base, data, out, test_data, cfg,
                         progress=progress if callable(progress) else None,
                         say=lambda m: stages.say(m, force=True))
        stages.done()
        if as_json:
            emit_json({**result.report, "steps": result.steps, "out": str(result.out)})
            return
        print_result(result)

    guarded(run)


def _terminal_progress(done: int, total: int, what: str) -> None:
    """'training the prior: 12/128' on one stderr line, rewritten in place (a terminal)."""
    import sys

    if not total:
        return
    sys.stderr.write(f"\r\033[K{what}: {done}/{total}" + ("\n" if done >= total else ""))
    sys.stderr.flush()


def _up(x) -> str:
    """A certified upper bound in 4 digits, rounded up."""
    from ..rounding import upper_text

    return "—" if x is None else upper_text(x, 4)


def claim_rows(rep: dict) -> list:
    """Every row of the report a table shows: the certified bounds on S, the rows about
    model/ itself that were evaluated, and the baseline (each a
    :meth:`boundcalc.claim.Claim.row`, naming its predictor)."""
    return [r for r in rep["certified"] if r["is_bound"]] + \
        [r for r in rep.get("model_rows", []) if r.get("value") is not None] + \
        ([rep["baseline"]] if rep.get("baseline") else [])


def certified_rows_tables(rep: dict) -> list:
    """One ``(title, table)`` per predictor the rows certify (:func:`boundcalc.claim.grouped`:
    the Gibbs predictor of model/, a trained posterior, the decoded model, model/ itself, the
    prior), the title naming it (printed on its own line, never cut); each row's value
    (rounded up), δ, the data it was measured on, vacuous or not, the held-out error of the
    Gibbs predictor it certifies (at the row's σ) and the floor (what dominates: in the line on
    the least row, and in report.json)."""
    from rich.table import Table

    from ..claim import grouped
    from ..rounding import lower_text

    left = sum(1 for r in rep["certified"] if not r["is_bound"])
    tables = []
    for heading, rows in grouped(claim_rows(rep)):
        t = Table(caption_justify="left", pad_edge=False)
        t.add_column("id", no_wrap=True)
        for col in ("value ≤", "δ", "on", "vacuous", "held-out", "floor"):
            t.add_column(col, justify="right", no_wrap=col != "on", min_width=len(col))
        for r in rows:
            g = r.get("gibbs_test_error")
            t.add_row(r["id"], _up(r["value"]), f"{r['delta']:.3g}", r["on"],
                      "—" if r.get("vacuous") is None else ("yes" if r["vacuous"] else "no"),
                      "—" if not g else f"{g['value']:.4f}",
                      "—" if r.get("floor") is None else lower_text(r["floor"], 3))
        tables.append((f"certified rows about {heading}, each at its own δ:", t))
    if tables:  # said once, under the last
        tables[-1][1].caption = (
            "held-out: the error of the Gibbs predictor of the row (Monte Carlo mean over "
            "per-row draws at the row's σ); floor: kl⁻¹(ê, c(δ)/n), the value with zero "
            "complexity; what dominates each: report.json"
            + (f"; {left} estimated row(s), not bounds, left out" if left else ""))
    return tables


def print_result(result) -> None:
    """The split, the certified rows (each naming the predictor it certifies, beside that
    predictor's held-out error), the least of them as compare quotes it (at δ/k, with its
    total probability), the rows about model/ itself, the baseline (not claimed) and the total
    probability of everything claimed."""
    from ..rounding import lower_text, probability_text

    rep = result.report
    sz = rep["sizes"]
    say = lambda text: console.print(text, highlight=False)  # noqa: E731
    say(f"prior's data {sz['prior']} rows, bound sample S {sz['S']} rows (n = {sz['S']}), σ "
        f"search on {sz['tune']} rows of the prior's data; output in "
        f"{escape(str(result.out))}")
    dup = rep.get("duplicates") or {}
    if dup.get("policy") == "drop":
        t = dup.get("test") or {}
        say(f"duplicates dropped before the split: {dup['data']['dropped']} of DATA's "
            f"{dup['data']['rows']} rows" + (f", {t['dropped']} of the {t['rows']} held-out "
                                              "rows" if t else "")
            + ": the certificates are about the distribution of distinct rows (report.json "
              "\"duplicates\")")
    if rep.get("test_error") is not None:
        say(f"held-out error ({rep['n_test']} rows): model/ {rep['test_error']:.4f}, prior "
            f"{rep['prior_test_error']:.4f}")
    else:
        say("held-out error: no --test-data given (no test-set bound for model/, no held-out "
            "error of the Gibbs predictor)")
    for title, table in certified_rows_tables(rep):
        say(title)
        console.print(table)
    m = rep.get("minimum")
    if m is not None and m["delta_total"] >= 1:  # never a bound: Σδ ≥ 1 guarantees nothing
        say(f"no certified minimum: {escape(m['line'])}")
        m = None
    elif m is None:
        say("no certified bound: see `boundcalc compare --stats "
            f"{escape(str(result.out / 'stats.json'))}`")
    else:
        state = "vacuous" if m["vacuous"] else "non-vacuous"
        floor = (f"; floor {lower_text(m['floor'], 4)}, dominated by {m['dominates']}"
                 if m.get("floor") is not None else "")
        say(f"certified for {m['certifies']}: ≤ {_up(m['value'])} with probability ≥ "
            f"{probability_text(m['delta_total'])}, {state} (vacuity level "
            f"{m['vacuous_at']:.4g}){floor}")
        say(f"  {escape(m['line'])}")
        g = m.get("gibbs_test_error")
        if g:
            say(f"  held-out error of that Gibbs predictor {g['value']:.4f} (Monte Carlo, "
                f"{g['draws']} per-row draws on the {rep['n_test']} held-out rows); of model/ "
                f"itself {rep['test_error']:.4f}")
    for r in (r for r in rep.get("model_rows", []) if r.get("is_bound") and "how" in r):
        say(f"certifies model/ itself: {r['id']} ≤ {_up(r['value'])} with probability ≥ "
            f"{probability_text(r['delta'])} (δ = {r['delta']:.3g}; {r['how']})")
    print_model_rows([r for r in rep.get("model_rows", []) if "how" not in r])
    c = rep.get("claimed") or {}
    if len(c.get("rows", [])) > 1:
        say(f"all claimed together ({', '.join(c['rows'])}): probability ≥ 1 − "
            f"({' + '.join(f'{d:.3g}' for d in c['deltas'])}) = "
            + (probability_text(c["delta_total"]) if c.get("probability") is not None else
               "no guarantee (Σδ ≥ 1)") + " (union bound)")
    b = rep.get("baseline")
    if b is not None:
        say(f"baseline, not claimed (shown for comparison, not in the total): holding S out "
            f"would certify the prior at ≤ {_up(b['value'])} (δ = {b['delta']:.3g}; "
            f"{b['errors']} errors of the prior on the {b['m']} rows of S); "
            + ("" if m is None else
               f"the PAC-Bayes minimum {_up(m['value'])} is "
               + (f"below it: the PAC-Bayes machinery buys {b['value'] - m['value']:.3g} here"
                  if m["value"] < b["value"] else "above it: here holding S out would certify "
                  "more than the PAC-Bayes machinery does")))
    say("model/, prior/ and the rows are in the output folder; the certificates hold for rows "
        "drawn like DATA's")


def print_model_rows(rows: list) -> None:
    """One line per row that certifies model/ itself through its Gibbs posterior (the Gibbs
    bound plus the disagreement on the held-out texts, :mod:`boundcalc.certify.model_rows`),
    value rounded up."""
    from ..rounding import upper_text

    for r in rows:
        if r.get("value") is None:
            console.print(f"model/ itself: {r['id']} not evaluated ({r.get('skipped', '?')})",
                          highlight=False)
            continue
        t, split = r["terms"], r.get("delta_split") or {}
        state = "vacuous" if r["vacuous"] else "non-vacuous"
        parts = " + ".join(f"{v:g}" for v in split.values())
        console.print(
            f"certifies {r['certifies']}: {r['id']} = {upper_text(r['value'], 4)} "
            f"({r['label']}, {state}), δ = {r['delta']:.3g}{f' = {parts}' if parts else ''}: "
            f"the Gibbs row {r['gibbs_row']} {upper_text(t['gibbs_bound'], 4)} + disagreement "
            f"≤ {upper_text(t['disagreement_upper'], 4)} ({r['disagreements']} of {r['rows']} "
            "held-out rows, labels unused)", highlight=False)
