"""certify's output folder is its own (boundcalc/certify/run_folder.py): an input under a name
certify writes is refused before anything is written; a non-empty folder that is not a certify
run is refused, not overwritten; a symbolic link where certify writes is one clean line; every
file a re-run reuses hashes to what certify recorded when it wrote it, else its step and the
later ones run again; and a run killed (SIGKILL) in any step resumes to the uninterrupted run's
certified value, bit for bit. Issue 42, items 2 and 3."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from boundcalc.cli import app
from boundcalc.errors import OutputError
from tests._certify_helpers import bert_config_folder, synthetic_rows, write_csv

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
# the issue's tiny options (--epochs 2 --post-epochs 1 --batch-size 16 --max-length 16
# --draws 1 --tune-rows 8 --device cpu), one σ and two group draws to keep it in seconds
TINY = dict(prior_epochs=2, post_epochs=1, batch_size=16, max_length=16, draws=1, tune_rows=8,
            device="cpu", sigmas=[0.01], group_draws=2)
FLAGS = ["--epochs", "2", "--post-epochs", "1", "--batch-size", "16", "--max-length", "16",
         "--draws", "1", "--tune-rows", "8", "--device", "cpu", "--sigma", "0.01",
         "--group-draws", "2"]


def _cfg():
    from boundcalc.certify import CertifyConfig

    return CertifyConfig(**{**TINY, "sigmas": tuple(TINY["sigmas"])})


@pytest.fixture(scope="module")
def w(tmp_path_factory):
    """A 2-layer BERT config, 64 labelled rows, 32 held-out rows, and one uninterrupted run
    into an existing empty folder (``run``)."""
    from boundcalc.certify import certify

    w = tmp_path_factory.mktemp("runfolder")
    bert_config_folder(w / "base", hidden=32, layers=2, heads=2)
    write_csv(w / "d.csv", synthetic_rows(64, 0))
    write_csv(w / "t.csv", synthetic_rows(32, 1))
    (w / "run").mkdir()
    res = certify(w / "base", w / "d.csv", w / "run", w / "t.csv", _cfg())
    assert res.steps == dict.fromkeys(("split", "prior", "posterior", "measure", "compare"),
                                      "ran")
    return w, res


def _values(res) -> list:
    return [res.report["minimum"]["value"]] + [c["value"] for c in res.report["certified"]]


def _tree(p: Path) -> dict[str, bytes]:
    """Every file under ``p`` (or ``p`` itself) by relative name, with its bytes."""
    if p.is_file():
        return {p.name: p.read_bytes()}
    return {str(f.relative_to(p)): f.read_bytes() for f in sorted(p.rglob("*")) if f.is_file()}


def _jsonl(rows: list) -> str:
    return "".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in rows)


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _again(w: Path, out: Path, **kw):
    from boundcalc.certify import certify

    from dataclasses import replace

    cfg = replace(_cfg(), tokenizer=str(kw.pop("tokenizer"))) if "tokenizer" in kw else _cfg()
    return certify(kw.pop("base", w / "base"), kw.pop("data", w / "d.csv"), out,
                   kw.pop("test_data", w / "t.csv"), cfg, **kw)


def _copy(w: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(w / "run", out)
    return out


# ---- inputs inside the output folder ---------------------------------------------------------

@pytest.mark.parametrize("role,name", [("data", "S.jsonl"), ("data", "prior.jsonl"),
                                       ("data", "tune.jsonl"), ("test_data", "test.jsonl"),
                                       ("base", "prior"), ("base", "model"),
                                       ("tokenizer", "prior"), ("base", "model.partial")])
def test_an_input_under_a_name_certify_writes_is_refused_before_any_write(w, tmp_path, role,
                                                                         name):
    w, _ = w
    out = tmp_path / "o"
    out.mkdir()
    place = out / name
    if role in ("base", "tokenizer"):
        shutil.copytree(w / "base", place)
    else:  # the rows as JSON Lines, which the name promises
        place.write_text(_jsonl(synthetic_rows(32, 1) if role == "test_data" else
                                synthetic_rows(64, 0)))
    before = _tree(out)
    with pytest.raises(OutputError, match=f"lies at {name} in the output folder"):
        _again(w, out, **{role: place})
    assert _tree(out) == before  # nothing written: not even the run's mark


def test_the_issue_example_exits_9_and_keeps_the_data(w, tmp_path):
    """mkdir o/p; cp d.jsonl o/p/S.jsonl; certify base --data o/p/S.jsonl -o o/p: one line
    naming the flags, exit 9, the file as it was."""
    w, _ = w
    p = tmp_path / "o" / "p"
    p.mkdir(parents=True)
    rows = _jsonl(synthetic_rows(64, 0))
    (p / "S.jsonl").write_text(rows)
    r = runner.invoke(app, ["certify", str(w / "base"), "--data", str(p / "S.jsonl"), "-o",
                            str(p), *FLAGS])
    assert r.exit_code == 9, r.output
    assert "--data" in r.output and "--out" in r.output and "Traceback" not in r.output
    assert os.listdir(p) == ["S.jsonl"] and (p / "S.jsonl").read_text() == rows


def test_an_output_folder_inside_the_base_is_refused(w, tmp_path):
    w, _ = w
    base = shutil.copytree(w / "base", tmp_path / "base")
    with pytest.raises(OutputError, match="lies inside the base model"):
        _again(w, base / "out", base=base)
    assert not (base / "out").exists()


@pytest.mark.parametrize("own", ["model/model.safetensors", "stats.json", "report.json"])
def test_a_folder_that_is_not_a_certify_run_is_refused_not_overwritten(w, tmp_path, own):
    w, _ = w
    out = tmp_path / "mine"
    (out / own).parent.mkdir(parents=True)
    (out / own).write_text('{"mine": 1}')
    with pytest.raises(OutputError, match="is not empty and is not a certify run"):
        _again(w, out)
    assert _tree(out) == {own: b'{"mine": 1}'}


def test_a_symlinked_prior_is_one_clean_line(w, tmp_path):
    w, _ = w
    out = _copy(w, tmp_path)
    shutil.rmtree(out / "prior")
    (out / "prior").symlink_to(w / "base", target_is_directory=True)
    base_before = _tree(w / "base")
    r = runner.invoke(app, ["certify", str(w / "base"), "--data", str(w / "d.csv"),
                            "--test-data", str(w / "t.csv"), "-o", str(out), *FLAGS])
    assert r.exit_code == 9, r.output
    assert "prior: is a symbolic link" in r.output and "OSError" not in r.output
    assert (out / "prior").is_symlink() and _tree(w / "base") == base_before


# ---- reuse is verified -----------------------------------------------------------------------

def test_a_hand_edited_report_is_not_printed(w, tmp_path):
    w, res = w
    out = _copy(w, tmp_path)
    rep = json.loads((out / "report.json").read_text())
    rep["minimum"]["value"] = 0.0123
    (out / "report.json").write_text(json.dumps(rep))
    r = runner.invoke(app, ["certify", str(w / "base"), "--data", str(w / "d.csv"),
                            "--test-data", str(w / "t.csv"), "-o", str(out), "--json", *FLAGS])
    assert r.exit_code == 0, r.output
    assert "0.0123" not in r.output
    printed = json.loads(r.output[r.output.index("{"):])
    assert printed["steps"]["compare"] == "ran" and printed["steps"]["measure"] == "reused"
    assert printed["minimum"]["value"] == res.report["minimum"]["value"]


def _flip_a_label(out: Path) -> None:
    lines = (out / "S.jsonl").read_text().splitlines()
    row = json.loads(lines[0])
    row["label"] = 1 - row["label"]
    (out / "S.jsonl").write_text("\n".join([json.dumps(row)] + lines[1:]) + "\n")


def _edit_stats(out: Path) -> None:
    doc = json.loads((out / "stats.json").read_text())
    doc["scalars"]["emp_risk"]["value"] = 0.0  # a training error of 0 lowers every bound
    (out / "stats.json").write_text(json.dumps(doc))


def _model_as_prior(out: Path) -> None:
    shutil.rmtree(out / "prior")
    shutil.copytree(out / "model", out / "prior")


def _edit_model(out: Path) -> None:
    shutil.copy(out / "prior" / "model.safetensors", out / "model" / "model.safetensors")


@pytest.mark.parametrize("edit,first", [(_edit_stats, "measure"), (_edit_model, "posterior"),
                                        (_model_as_prior, "prior"), (_flip_a_label, "split")])
def test_an_edited_output_reruns_its_step_and_every_later_one(w, tmp_path, edit, first):
    """A file certify did not write as it is now is never reused: its step and the later ones
    run again and give the uninterrupted run's numbers and files, bit for bit."""
    w, res = w
    out = _copy(w, tmp_path)
    edit(out)
    again = _again(w, out)
    order = list(again.steps)
    assert again.steps == {s: "reused" if order.index(s) < order.index(first) else "ran"
                           for s in order}
    assert _values(again) == _values(res)
    for name in ("S.jsonl", "prior/model.safetensors", "model/model.safetensors"):
        assert _sha(out / name) == _sha(w / "run" / name), name


def test_an_unreadable_record_is_refused(w, tmp_path):
    w, _ = w
    out = _copy(w, tmp_path)
    (out / "certify_run.json").write_text("{}")
    with pytest.raises(OutputError, match="not a manifest of boundcalc certify"):
        _again(w, out)


# ---- a kill in any step resumes to the uninterrupted value -----------------------------------

CHILD = """
import json, os, signal, sys
from boundcalc.certify import CertifyConfig, certify
base, data, out, test, stage, conf = sys.argv[1:]
conf = json.loads(conf)
conf["sigmas"] = tuple(conf["sigmas"])

def progress(done, total, what):
    training = what.startswith("training the ")
    if (stage == "measure" and not training) or (what == "training the " + stage and done >= 1):
        os.kill(os.getpid(), signal.SIGKILL)  # kill -9, inside the step

certify(base, data, out, test, CertifyConfig(**conf), progress=progress)
sys.exit(3)  # never killed
"""


def test_a_kill_in_each_step_resumes_to_the_uninterrupted_value(w, tmp_path):
    """Killed (SIGKILL) in the prior's training, then, resumed in a fresh process, in the
    posterior's, then, resumed again, in the measurement; a last resume certifies what the
    uninterrupted run certified, bit for bit, from the same bytes of prior/ and model/."""
    w, res = w
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for stage, (made, not_yet) in (("prior", ("split.json", "prior")),
                                   ("posterior", ("prior", "model")),
                                   ("measure", ("model", "stats.json"))):
        r = subprocess.run([sys.executable, "-c", CHILD, str(w / "base"), str(w / "d.csv"),
                            str(out), str(w / "t.csv"), stage, json.dumps(TINY)],
                           env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]
        assert (out / made).exists() and not (out / not_yet).exists()  # killed in the step
    last = _again(w, out)
    assert last.steps == {"split": "reused", "prior": "reused", "posterior": "reused",
                          "measure": "ran", "compare": "ran"}
    assert _values(last) == _values(res)
    for name in ("prior/model.safetensors", "model/model.safetensors"):
        assert _sha(out / name) == _sha(w / "run" / name), name


@pytest.mark.parametrize("steps,taken", [({"split": "0123456789abcdef", "prior": "fedc"}, True),
                                         ({"mine": "1"}, False), ([1, 2], False)])
def test_an_earlier_certifys_folder_is_taken_over_and_rerun(tmp_path, steps, taken):
    """A folder an earlier certify wrote (steps.json: step names → keys, no hashes) is a run:
    marked, and nothing in it verified, so every step runs; any other steps.json is the user's."""
    from boundcalc.certify.pipeline import STEPS
    from boundcalc.certify.run_folder import RunFolder

    out = tmp_path / "old"
    out.mkdir()
    (out / "steps.json").write_text(json.dumps(steps))
    (out / "report.json").write_text('{"minimum": {"value": 0.0123}}')
    said = []
    if not taken:
        with pytest.raises(OutputError, match="is not empty and is not a certify run"):
            RunFolder(out, STEPS, {}, said.append)
        assert sorted(os.listdir(out)) == ["report.json", "steps.json"]
        return
    run = RunFolder(out, STEPS, {}, said.append)
    assert "every step runs again" in said[0]
    assert json.loads((out / "certify_run.json").read_text())["steps"] == {}
    assert not run.fresh("split", "0123456789abcdef", [out / "split.json"])
    assert not run.fresh("compare", "k", [out / "report.json"])


def test_an_earlier_runs_held_out_rows_are_not_used_without_a_held_out_set(w, tmp_path):
    """Re-run without the held-out set: no row certifies model/ on the rows an earlier run was
    given (model_rows read any test.jsonl it found)."""
    w, res = w
    assert res.report["model_rows"]  # with the held-out set: rows for model/ itself
    out = _copy(w, tmp_path)
    again = _again(w, out, test_data=None)
    assert again.steps["split"] == "ran"
    assert again.report["model_rows"] == [] and again.report["n_test"] is None
    assert not (out / "test.jsonl").exists() and not (out / "stats_model.json").exists()
