"""``boundcalc holdout``: a classifier you already trained, certified by the test-set bound on
your own held-out rows (:mod:`boundcalc.certify.holdout`); a causal language model, its held-out
bits per token (:mod:`boundcalc.certify.holdout_lm`)."""

from __future__ import annotations

from typing import Optional

import typer
from rich.markup import escape

from ..certify.config import HoldoutConfig
from .app import app, console, emit_json, guarded
from .progress import Stages, check_device, require_paths
from .record_options import takes


MODEL_HELP = ("your trained sequence classifier: a Hugging Face folder saved with "
              "save_pretrained (config.json, weights, tokenizer)")
TEST_DATA_HELP = ("held-out labelled rows the model never saw and was not selected on: CSV, "
                  "JSON Lines, Parquet or a datasets.save_to_disk folder")


@app.command("holdout")
@takes(HoldoutConfig)
def holdout_cmd(
    model: str = typer.Argument(..., help=MODEL_HELP),
    test_data: str = typer.Option(..., "--test-data", help=TEST_DATA_HELP),
    as_json: bool = typer.Option(False, "--json", help="print the record as JSON"),
    latex: Optional[str] = typer.Option(None, "--latex", metavar="FILE", help="also write "
                                        "the instantiated bound's LaTeX (align*) to FILE"),
    values: dict = None,  # the HoldoutConfig fields, from their declarations (takes)
) -> None:
    """Certify a classifier you already trained: its errors k on your m held-out rows give
    the test-set bound kl^-1(k/m, ln(1/delta)/m) (test_set_kl, Langford 2005), for the model
    itself, with probability >= 1 - delta, on the distribution the held-out rows were drawn
    from. The model is evaluated in batches (on the card when there is one); a row that cannot
    be read counts as an error. The same number as `boundcalc optimize test_set_kl --set
    test_errors=k,m=m`. A causal language model: its mean smoothed log-loss L on the m rows
    (each row one unit) gives log2(V/alpha)*kl^-1(L, ln(1/delta)/m) bits per token
    (test_set_smoothed_kl); an unreadable row counts at the largest loss.
    """

    def run() -> None:
        cfg = HoldoutConfig(**values[HoldoutConfig])  # every value checked first
        require_paths(model=model, test_data=test_data)
        check_device(cfg.device)
        stages = Stages("holdout")
        from ..certify.holdout import holdout

        res = holdout(model, test_data, cfg, say=lambda m: stages.say(m, force=True))
        stages.done()
        if latex is not None:
            from ..files import write_text_atomic

            write_text_atomic(latex, res.latex + "\n")
        if as_json:
            emit_json(res.record())
            return
        if hasattr(res, "held_out_bits"):
            print_lm_holdout(res)
        else:
            print_holdout(res)

    guarded(run)


def print_holdout(res) -> None:
    """The certified value (rounded up) with its δ, the count it rests on, the unreadable
    rows, the LaTeX of the instantiated bound and the pointer to the disagreement route."""
    from ..rounding import probability_text, upper_text

    rec, r = res.record(), res.result
    say = lambda text: console.print(text, highlight=False, soft_wrap=True)  # noqa: E731
    say(f"held-out error of {escape(res.model)}: {res.errors} of {res.m} rows = "
        f"{res.error_rate:.4f}" + (f" ({len(res.unreadable)} unreadable row(s) counted as "
                                   f"errors, first: row {res.unreadable[0]})"
                                   if res.unreadable else "; every row read"))
    state = "" if r.vacuous is None else (", vacuous" if r.vacuous else ", non-vacuous")
    say(f"certified for the model itself: test_set_kl ≤ {upper_text(r.value, 4)} with "
        f"probability ≥ {probability_text(r.delta)} (δ = {r.delta:g}{state}), on the "
        "distribution the held-out rows were drawn from")
    say(escape(res.latex))
    say(f"note: {escape(rec['note'])}")


def print_lm_holdout(res) -> None:
    """A language model's certified bits (rounded up) with δ, the i.i.d. unit, the held-out
    loss it rests on, the unreadable rows and the LaTeX of the instantiated bound."""
    from ..rounding import probability_text, upper_text

    rec, r = res.record(), res.result
    say = lambda text: console.print(text, highlight=False, soft_wrap=True)  # noqa: E731
    say(f"held-out loss of {escape(res.model)} on {res.m} units ({res.tokens} predicted "
        f"{res.per}s): {res.held_out_bits:.4f} bits per {res.per} smoothed with α = "
        f"{res.alpha:g} (unsmoothed {res.nll_bits:.4f}; top-1 error {res.top1_error:.4f}; "
        f"uniform guess {rec['random_guess_bits']:.4f})"
        + (f"; {len(res.unreadable)} unreadable row(s) counted at the largest loss, first: "
           f"row {res.unreadable[0]}" if res.unreadable else "; every row read"))
    say(f"unit (i.i.d.): {escape(rec['iid_unit'])}")
    say(f"certified for the α-smoothed model itself: {ENTRY} ≤ {upper_text(r.value, 4)} bits "
        f"per {res.per} with probability ≥ {probability_text(r.delta)} (δ = {r.delta:g}), on "
        "the distribution the held-out rows were drawn from")
    say(escape(res.latex))


ENTRY = "test_set_smoothed_kl"
