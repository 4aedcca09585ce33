"""``boundcalc certify``: base model + labelled data → a certificate for the model it trains."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from .app import app, console, emit_json, guarded
from .progress import Stages, check_device, require_paths


@app.command("certify")
def certify_cmd(
    base: str = typer.Argument(..., help="the base model: a Hugging Face folder (pretrained, "
                               "with or without a task head), or a folder / config.json with "
                               "a config only (a random initialisation)"),
    data: str = typer.Option(..., "--data", help="labelled data: CSV, JSON Lines, Parquet or "
                             "a datasets.save_to_disk folder; split into the prior's data and "
                             "the bound sample S"),
    test_data: Optional[str] = typer.Option(None, "--test-data", help="a held-out labelled "
                                            "set (same columns): its error is printed beside "
                                            "every certified value; never used otherwise"),
    out: Path = typer.Option(Path("out/certify"), "-o", "--out", help="output folder: the "
                             "splits, prior/, model/, stats.json, report.json; a run resumes "
                             "from what is there"),
    text_column: str = typer.Option("text", "--text-column", help="text column of DATA"),
    label_column: str = typer.Option("label", "--label-column", help="label column of DATA "
                                     "(integers or names; each distinct value is a class)"),
    prior_fraction: float = typer.Option(0.5, "--prior-fraction", help="share of each "
                                         "class's rows that trains the prior; the rest is S"),
    seed: int = typer.Option(0, "--seed", help="seed of the split, the new head and training"),
    epochs: Optional[int] = typer.Option(None, "--epochs", min=0, help="prior training "
                                         "epochs (default 2 for a pretrained base, 4 for a "
                                         "config)"),
    post_epochs: int = typer.Option(1, "--post-epochs", min=0, help="posterior epochs on S"),
    lr: Optional[float] = typer.Option(None, "--lr", help="prior learning rate (default 1e-4 "
                                       "for a pretrained base, 1e-3 for a config)"),
    post_lr: Optional[float] = typer.Option(None, "--post-lr", help="posterior learning rate "
                                            "(default 3e-5 pretrained, 3e-4 config)"),
    proximal: float = typer.Option(1.0, "--proximal", min=0.0, help="posterior loss: "
                                   "cross-entropy + PROXIMAL·‖w − w_prior‖²"),
    batch_size: int = typer.Option(32, "--batch-size", min=1, help="rows per batch"),
    max_length: int = typer.Option(64, "--max-length", min=2, help="tokens per text"),
    sigma: Optional[list[float]] = typer.Option(None, "--sigma", help="isotropic posterior σ "
                                                "(repeatable; default 0.003 and 0.01)"),
    draws: int = typer.Option(3, "--draws", min=1, help="Monte Carlo passes over S per σ"),
    tune_rows: int = typer.Option(192, "--tune-rows", min=0, help="rows of the prior's data "
                                  "on which the per-group σ is searched (0: none)"),
    tune_draws: int = typer.Option(1, "--tune-draws", min=1, help="Monte Carlo passes per σ "
                                   "vector tried by the search (free: it never sees S)"),
    group_draws: int = typer.Option(6, "--group-draws", min=1, help="Monte Carlo passes over "
                                    "S at the per-group σ"),
    posterior: str = typer.Option("proximal", "--posterior", help="proximal: certify the "
                                  "Gibbs posteriors around model/ (σ searched); bound: also "
                                  "train a Gaussian posterior (means and per-group σ) on the "
                                  "PAC-Bayes bound itself and certify it (posterior_bound/)"),
    compress: bool = typer.Option(False, "--compress", help="also the compression bounds "
                                  "(k-means code of w − w_prior on levels 1 and 16)"),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="a folder with the "
                                            "tokenizer, when BASE has none"),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda (training and "
                               "measuring)"),
    as_json: bool = typer.Option(False, "--json", help="print report.json instead of tables"),
) -> None:
    """Certify the model this command trains: split DATA (stratified, seeded) into the prior's
    data and the bound sample S, fine-tune BASE on the prior's data (the prior), fine-tune the
    prior on S with a proximal pull (the model), then measure with --init prior --tune-data
    and compare.

    The certificate is for the model trained here (model/ in the output folder; for the Gibbs
    rows, the random posterior around it), on the distribution DATA's rows were drawn from.
    To certify a model you trained yourself, use `boundcalc measure` with your pretrained base
    (or any checkpoint that never saw S) as --init, a held-out split as --tune-data and a sample
    the model was not selected on as --data (see the guide).

    Every step writes its output to the output folder and is reused on a re-run with the same
    inputs and settings: a killed run resumes.
    """

    def run() -> None:
        from ..errors import BoundcalcError

        if not 0 < prior_fraction < 1:
            raise BoundcalcError(f"--prior-fraction must lie in (0, 1), got {prior_fraction}")
        from ..certify.bound_posterior import check_posterior

        check_posterior(posterior)
        require_paths(model=base, data=data, test_data=test_data, tokenizer=tokenizer)
        check_device(device)  # before transformers and the model
        stages = Stages("certify")
        from ..certify import CertifyConfig, certify

        cfg = CertifyConfig(prior_fraction=prior_fraction, seed=seed, prior_epochs=epochs,
                            prior_lr=lr, post_epochs=post_epochs, post_lr=post_lr,
                            proximal=proximal, batch_size=batch_size, max_length=max_length,
                            text_column=text_column, label_column=label_column, device=device,
                            sigmas=tuple(sigma) if sigma else CertifyConfig.sigmas,
                            draws=draws, tune_rows=tune_rows, tune_draws=tune_draws,
                            group_draws=group_draws, posterior=posterior,
                            compress=compress, tokenizer=tokenizer)
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


def print_result(result) -> None:
    """The split, the held-out errors, the certified table with floors and what dominates,
    and one line on the best certified value."""
    from ..report.tables import certified_table, floor_table

    rep = result.report
    sz = rep["sizes"]
    console.print(f"prior's data {sz['prior']} rows, bound sample S {sz['S']} rows "
                  f"(n = {sz['S']}), σ search on {sz['tune']} rows of the prior's data; "
                  f"output in {escape(str(result.out))}", highlight=False)
    if rep.get("test_error") is not None:
        console.print(f"held-out error {rep['test_error']:.4f} (model/, n = {rep['n_test']}); "
                      f"prior {rep['prior_test_error']:.4f}", highlight=False)
    else:
        console.print("held-out error: no --test-data given", highlight=False)
    if result.certified:
        console.print(certified_table(result.certified))
        console.print(floor_table(result.certified))
    best = rep.get("best")
    if best is None:
        console.print("no certified bound: see `boundcalc compare --stats "
                      f"{escape(str(result.out / 'stats.json'))}`", highlight=False)
        return
    state = "vacuous" if best["vacuous"] else "non-vacuous"
    floor = (f"; floor {best['floor']:.4f}; dominated by {best['dominates']}"
             if best.get("floor") is not None else "")
    console.print(f"certified: {best['id']} = {best['value']:.4f}, {state} (vacuity level "
                  f"{best['vacuous_at']:.4g}), δ = {best['delta']:.3g}{floor}", highlight=False)
    console.print("this certifies the model trained here (model/; a Gibbs row: the random "
                  "posterior around it), for rows drawn like DATA's", highlight=False)
