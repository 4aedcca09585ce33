"""One run of ``certify --posterior bound --compress --test-data`` on a tiny BERT config
(issue 53 items 3 and 4), checked from outside:

* every row kind names the predictor it certifies, in report.json and in the terminal table
  of its predictor (the Gibbs predictor of model/, the bound-trained posterior, the decoded
  model, model/ itself, the prior): no ``certifies`` is null, no row sits under another
  predictor's title;
* the run loads each model folder once for the measurement and the comparison, and reads
  test.jsonl once: every load of a Hugging Face model (``PreTrainedModel.from_pretrained``,
  which both loaders reach) and every read of a data file (the readers bound in any module
  of the package) is counted here by path.
"""

from __future__ import annotations

import io
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests._certify_helpers import bert_config_folder, synthetic_rows, write_csv

READERS = ("read_columns", "read_json_lines", "read_batches")


def _count_everywhere(monkeypatch, module_name: str, name: str, seen: Counter) -> None:
    """Wrap ``module.name`` in every loaded boundcalc module that bound it, counting the path
    of each call (its first argument)."""
    import importlib

    original = getattr(importlib.import_module(module_name), name)

    def counting(path, *a, **k):
        seen[Path(path).name] += 1
        return original(path, *a, **k)

    for mod in [m for n, m in list(sys.modules.items()) if n.startswith("boundcalc")]:
        if getattr(mod, name, None) is original:
            monkeypatch.setattr(mod, name, counting)


def _counted_certify(w: Path, n: int, out: Path | None = None, **settings):
    """certify on ``n`` synthetic rows and ``n // 2`` held-out rows into ``out`` (default
    ``w / "out"``), every model load and data read counted: ``(result, loads, reads)`` by file
    or folder name."""
    import transformers

    import boundcalc.certify.heldout  # noqa: F401 (imported before the counting wraps them)
    import boundcalc.certify.loaded  # noqa: F401
    import boundcalc.certify.train  # noqa: F401
    import boundcalc.measure.data.task_measure  # noqa: F401
    from boundcalc.certify import CertifyConfig, certify

    base = bert_config_folder(w / "base", hidden=32, layers=1, heads=2)
    write_csv(w / "d.csv", synthetic_rows(n, 0))
    write_csv(w / "t.csv", synthetic_rows(n // 2, 1))
    loads, reads = Counter(), Counter()
    original = transformers.PreTrainedModel.from_pretrained.__func__

    def counting(cls, path, *a, **k):
        loads[Path(path).name] += 1
        return original(cls, path, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(transformers.PreTrainedModel, "from_pretrained", classmethod(counting))
        for module, name in (("boundcalc.measure.data.dataset_io", "read_columns"),
                             ("boundcalc.files", "read_json_lines"),
                             ("boundcalc.measure.data.dataset_io", "read_batches")):
            _count_everywhere(mp, module, name, reads)
        res = certify(base, w / "d.csv", out or w / "out", w / "t.csv", CertifyConfig(
            prior_lr=3e-3, post_lr=1e-3, batch_size=16, max_length=24, sigmas=(0.01,),
            draws=1, tune_draws=1, posterior="bound", **settings))
    return res, loads, reads


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return _counted_certify(tmp_path_factory.mktemp("claims_loaded"), 160, prior_epochs=6,
                            tune_rows=40, group_draws=2, compress=True)


def test_each_model_folder_is_loaded_once_and_test_jsonl_read_once(run):
    res, loads, reads = run
    assert set(res.steps.values()) == {"ran"}
    # model/: once, shared by the measurement, the bound-trained posterior (which trains a copy
    # of it), the held-out counts, the Gibbs held-out error and the disagreement route; the
    # compression moves it to the CPU in float32, so it is read afresh once after it
    assert loads["model"] == 2
    # prior/: once as the posterior's starting point (trained in place into model/), once shared
    assert loads["prior"] == 2
    assert reads["test.jsonl"] == 1


def test_without_compression_model_is_loaded_once(tmp_path, monkeypatch):
    """The same recipe without compression (a smaller run of its own, its output folder given
    relative to the working directory, as on a command line): model/ once, prior/ twice
    (training, shared), test.jsonl once."""
    monkeypatch.chdir(tmp_path)
    _, loads, reads = _counted_certify(tmp_path, 100, Path("out"), prior_epochs=2,
                                       tune_rows=24, group_draws=1)
    assert (loads["model"], loads["prior"], reads["test.jsonl"]) == (1, 2, 1)


# the predictor each row kind certifies, as report.json names it
KINDS = {"pac_bayes_kl_gaussian_mc": "gibbs", "pac_bayes_kl_gaussian_groups_mc": "gibbs",
         "pac_bayes_kl_gaussian_learned_mc": "bound_posterior", "occam_kl": "decoded",
         "test_set_kl": "model", "disagreement_gibbs_groups_mc": "model"}


def test_every_row_names_its_predictor_in_report_json(run):
    import json

    from boundcalc.claim import PREDICTORS

    res = run[0]
    rep = json.loads((res.out / "report.json").read_text())
    rows = rep["certified"] + rep["model_rows"] + [rep["baseline"]]
    assert all(r["certifies"] and r["predictor"] in PREDICTORS for r in rows)
    by_id = {r["id"]: r for r in rep["certified"] + rep["model_rows"]}
    for ident, key in KINDS.items():
        assert by_id[ident]["predictor"] == key, ident
        assert by_id[ident]["about"] == PREDICTORS[key]
    assert rep["baseline"]["predictor"] == "prior" and rep["baseline"]["claimed"] is False
    # the words: a Gibbs row at its σ, the trained posterior, the decoded model, model/ itself
    iso = by_id["pac_bayes_kl_gaussian_mc"]
    assert iso["certifies"].startswith("the Gibbs predictor of model/") and \
        iso["certifies"].endswith(f"σ = {iso['sigma']:.4g}") and \
        abs(iso["sigma"] / 0.01 - 1) < 0.01  # the σ asked for, snapped to the grid
    assert "bound-trained Gibbs posterior" in by_id["pac_bayes_kl_gaussian_learned_mc"][
        "certifies"]
    assert by_id["occam_kl"]["certifies"] and "certifies" not in by_id["occam_kl"]["certifies"]
    assert by_id["test_set_kl"]["certifies"] == "model/ itself"
    assert rep["minimum"]["predictor"] == by_id[rep["minimum"]["id"]]["predictor"]


def test_the_terminal_tables_are_titled_by_the_predictor_of_their_rows(run, monkeypatch):
    from rich.console import Console

    from boundcalc.claim import PREDICTORS
    from boundcalc.cli import certify_cmd

    res = run[0]
    buf = io.StringIO()
    monkeypatch.setattr(certify_cmd, "console", Console(file=buf, width=400))
    certify_cmd.print_result(res)
    text = buf.getvalue()
    titles = {key: f"certified rows about {PREDICTORS[key]}" for key in PREDICTORS
              if key in set(KINDS.values()) | {"prior"}}
    at = {key: text.index(t) for key, t in titles.items()}  # each table is printed
    order = sorted(at, key=at.get)
    assert order == [k for k in PREDICTORS if k in at]  # in the declared order
    for ident, key in KINDS.items():
        pos = text.index(ident + " ")  # the row's first appearance is in its table
        after = [k for k in order if at[k] < pos]
        assert after and after[-1] == key, (ident, after)
    # the old title, which claimed every row was about the Gibbs predictor, is gone
    assert "each at its own δ: the Gibbs predictor of model/ (not model/ itself)" not in text


def test_compare_and_latex_name_the_predictor_of_every_certified_row(run, tmp_path):
    """The same claim words outside certify: ``compare --json`` gives every certified row its
    predictor, and ``optimize``'s LaTeX says what a Gibbs row is about."""
    import json

    from boundcalc.claim import PREDICTORS
    from tests._cli_helpers import invoke

    stats = run[0].out / "stats.json"
    doc = json.loads(invoke("compare", "--stats", stats, "--json").stdout)
    rows = {r["id"]: r for r in doc["certified"]}
    assert rows and all(r["predictor"]["about"] in PREDICTORS and
                        r["predictor"]["text"].startswith("certifies ") for r in rows.values())
    for ident in ("pac_bayes_kl_gaussian_mc", "pac_bayes_kl_gaussian_learned_mc", "occam_kl"):
        assert rows[ident]["predictor"]["about"] == KINDS[ident]
    assert rows["pac_bayes_kl_gaussian_mc"]["certifies"] is None  # no compression record
    tex = tmp_path / "o.tex"
    res = invoke("optimize", "pac_bayes_kl_gaussian_mc", "--stats", stats, "--no-what-if",
                 "--latex", tex)
    assert res.exit_code == 0, res.output
    assert "About: certifies the Gibbs predictor of the measured model" in tex.read_text()
