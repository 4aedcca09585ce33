"""Reproducible, atomic and honestly labelled outputs.

* Same inputs give bit-identical results: ``Result.to_json()`` dumped twice in one process, and
  in two fresh processes with different hash seeds; measuring the same tiny model twice gives
  byte-identical stats files.
* A run killed mid-write never leaves a half-written stats file.
* Only a certified entry with no estimated input is ever called a certified bound: rate and
  proxy entries are labelled as such in JSON, the rich table and LaTeX, and a certified entry
  bound to an estimated quantity is marked estimated everywhere.
"""

from __future__ import annotations

import json
import math
import re
import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from boundcalc.errors import StatsError
from typer.testing import CliRunner

import boundcalc as bc
from boundcalc.cli import app
from boundcalc.errors import BoundcalcError
from boundcalc.stats import load_stats, stats_from_json, write_json_atomic

REGISTRY = bc.load_registry()
runner = CliRunner(env={"COLUMNS": "300"})


def typical_values(entry) -> dict:
    """Plain in-domain values for every symbol without a default (arrays of two instances)."""
    order_by_role = {"data_size": (10000.0,), "confidence": (0.05,),
                     "hidden_constant": (1.0,), "size": (2.0,)}
    values = {}
    for name, s in entry.symbols.items():
        cands = (*order_by_role.get(s.role, ()), 0.1, 0.05, 1.0, 2.0, 1000.0, 0.5)
        x = next((c for c in cands if s.domain.contains(c)), None)
        if x is None:
            x = s.domain.lo + 1 if math.isfinite(s.domain.lo) else 0.0
        if s.role == "size":
            values[name] = 2.0
        elif s.indexed and f"{name}_prior_c" in entry.symbols:  # on its Dziugaite–Roy grid
            c = entry.symbols[f"{name}_prior_c"].default
            b = entry.symbols[f"{name}_prior_b"].default
            shape = tuple(2 for _ in s.indices)
            j = 1 + np.arange(int(np.prod(shape))).reshape(shape)
            values[name] = np.sqrt(c * np.exp(-j / b))
        elif s.indexed:
            shape = tuple(2 for _ in s.indices)
            base = np.full(shape, x)
            values[name] = base * (1 + 0.1 * np.arange(base.size).reshape(shape)) \
                if s.domain.contains(x * 1.5) else base
        elif s.default is None:
            values[name] = x
    # free parameters that have neither a default nor a closed form: a value in the domain,
    # or a point of the grid (GridMin parameters are chosen inside the formula)
    from boundcalc.evaluation import Prepared, gridmin_params

    need = [p for p in entry.parameters.values() if p.default is None and p.closed_form is None
            and p.name not in gridmin_params(entry)]
    if need:
        grids = Prepared(entry, values).grids
        for p in need:
            if p.grid is not None:
                g = grids[p.name]
                values[p.name] = float(g[int(np.argmin(np.abs(np.log(np.abs(g) + 1e-300))))])
            elif p.prior is not None:
                values[p.name] = float(p.prior.value(1))
            else:
                values[p.name] = next(c for c in (1.0, 0.5, 0.1, 2.0) if p.domain.contains(c))
    return values


def _evaluable():
    ok, skipped = [], {}
    for e in REGISTRY:
        try:
            bc.evaluate(e, typical_values(e))
            ok.append(e)
        except BoundcalcError as exc:
            skipped[e.id] = str(exc)[:120]
    return ok, skipped


EVALUABLE, NOT_EVALUABLE = _evaluable()


def test_most_entries_evaluate_at_typical_values():
    """The label and reproducibility sweeps below run over these entries; the others are
    listed here (they need hand-picked values or have a known bug)."""
    assert len(EVALUABLE) >= len(REGISTRY) - 3, NOT_EVALUABLE
    for must in ("mcallester", "pac_bayes_kl", "catoni", "spectrum_adaptive_ours",
                 "spectrum_adaptive_edelman"):
        if must in REGISTRY:
            assert must in {e.id for e in EVALUABLE}, NOT_EVALUABLE.get(must)


def _dump(result) -> str:
    return json.dumps(result.to_json(), sort_keys=True, default=repr)


# ---- same inputs, same bits ------------------------------------------------------------------

def test_results_are_bit_identical_within_a_process():
    first = {e.id: _dump(bc.evaluate(e, typical_values(e))) for e in EVALUABLE}
    fresh = bc.load_registry()  # new Entry objects, nothing cached
    second = {e.id: _dump(bc.evaluate(fresh.get(e.id), typical_values(e))) for e in EVALUABLE}
    assert first == second


CHILD = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {tests!r})
    from test_reproducibility import EVALUABLE, typical_values, _dump, tiny_encoder_file
    import boundcalc as bc
    out = {{e.id: _dump(bc.evaluate(e, typical_values(e))) for e in EVALUABLE}}
    try:
        from boundcalc.measure import measure
    except ImportError:
        measure = None
    if measure is not None:
        stats = measure(tiny_encoder_file(sys.argv[1]), n_heads=2, seed=0, progress=False)
        stats.save(sys.argv[2])
    print(json.dumps(out))
""")


def _measure_module():
    try:
        from boundcalc.measure import measure
    except ImportError:
        return None
    return measure


def tiny_encoder_file(folder: str) -> str:
    """A 2-layer torch TransformerEncoder (d=8, 2 heads) saved as safetensors, fixed seed."""
    import torch
    from safetensors.torch import save_file

    path = Path(folder) / "enc.safetensors"
    if not path.exists():
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16,
                                                 batch_first=True)
        enc = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        save_file({k: v.detach().clone().contiguous() for k, v in enc.state_dict().items()},
                  str(path))
    return str(path)


def test_results_and_stats_are_bit_identical_across_fresh_processes(tmp_path):
    """Two interpreters with different hash seeds (set iteration order differs): the same
    evaluation JSON for every entry, and byte-identical stats files from measure."""
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    tiny_encoder_file(str(model_dir)) if _measure_module() else None
    code = CHILD.format(tests=str(Path(__file__).parent))
    procs = []
    for k, seed in enumerate(("0", "12345")):
        env = dict(os.environ, PYTHONHASHSEED=seed, OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen(
            [sys.executable, "-c", code, str(model_dir), str(tmp_path / f"stats{k}.json")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr[-3000:]
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    assert outs[0] == outs[1]
    here = {e.id: _dump(bc.evaluate(e, typical_values(e))) for e in EVALUABLE}
    assert outs[0] == here
    if _measure_module() is not None:
        a, b = (tmp_path / "stats0.json").read_bytes(), (tmp_path / "stats1.json").read_bytes()
        assert a == b
        assert load_stats(tmp_path / "stats0.json").matrices


@pytest.mark.skipif(_measure_module() is None, reason="boundcalc.measure is not available yet")
def test_measuring_the_same_model_twice_gives_byte_identical_stats(tmp_path):
    measure = _measure_module()
    src = tiny_encoder_file(str(tmp_path))
    paths = []
    for k in range(2):
        stats = measure(src, n_heads=2, seed=0, progress=False)
        paths.append(stats.save(tmp_path / f"s{k}.json"))
    assert paths[0].read_bytes() == paths[1].read_bytes()
    # and the file round-trips: loading and saving again gives the same bytes
    again = load_stats(paths[0]).save(tmp_path / "again.json")
    assert again.read_bytes() == paths[0].read_bytes()


# ---- atomic writes -------------------------------------------------------------------------------

N_FLOATS = 300_000  # about 2.5 MB of JSON per write


def _documents():
    a = {"schema": "A", "data": [0.5] * N_FLOATS}
    b = {"schema": "B", "data": [0.25] * (N_FLOATS + 7)}
    return a, b


def _writer_loop(path: str, naive: bool) -> None:
    a, b = _documents()
    i = 0
    while True:
        doc = a if i % 2 == 0 else b
        if naive:  # what write_json_atomic must not be: truncate, then write slowly
            text = json.dumps(doc)
            with open(path, "w") as fh:
                fh.write(text[: len(text) // 2])
                fh.flush()
                time.sleep(1.0)
                fh.write(text[len(text) // 2:])
        else:
            write_json_atomic(path, doc)
        i += 1


def _state(path: Path) -> str:
    """'absent', 'A', 'B', or 'BROKEN' for a half-written / foreign file."""
    if not path.exists():
        return "absent"
    try:
        doc = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError):
        return "BROKEN"
    a, b = _documents()
    return {"A": "A" if doc == a else "BROKEN", "B": "B" if doc == b else "BROKEN"}.get(
        doc.get("schema"), "BROKEN") if isinstance(doc, dict) else "BROKEN"


def _kill_rounds(path: Path, naive: bool, rounds: int, rng: random.Random,
                 delay: tuple[float, float] = (0.02, 0.25)) -> list[str]:
    ctx = mp.get_context("fork")
    states = []
    for _ in range(rounds):
        proc = ctx.Process(target=_writer_loop, args=(str(path), naive), daemon=True)
        proc.start()
        time.sleep(rng.uniform(*delay))
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(10)
        assert proc.exitcode == -signal.SIGKILL
        states.append(_state(path))
    return states


@pytest.mark.skipif(sys.platform == "win32", reason="needs fork and SIGKILL")
def test_write_killed_at_random_moments_never_leaves_a_half_written_file(tmp_path):
    target = tmp_path / "stats.json"
    rng = random.Random(0)
    states = _kill_rounds(target, naive=False, rounds=10, rng=rng)
    if not {"A", "B"} & set(states):  # a loaded machine may not finish one write that fast
        states += _kill_rounds(target, naive=False, rounds=3, rng=rng, delay=(1.0, 2.0))
    assert "BROKEN" not in states, states
    assert {"A", "B"} & set(states), states  # the writer did get to write
    # the file left behind is always loadable as it was written
    assert _state(target) in ("A", "B")


@pytest.mark.skipif(sys.platform == "win32", reason="needs fork and SIGKILL")
def test_kill_harness_detects_a_non_atomic_writer(tmp_path):
    """Negative control: a plain open(..., 'w') writer killed mid-write leaves a broken file,
    and the harness above sees it."""
    target = tmp_path / "naive.json"
    states = _kill_rounds(target, naive=True, rounds=2, rng=random.Random(1), delay=(0.3, 0.6))
    assert "BROKEN" in states, states


def test_failed_serialisation_leaves_the_old_file_and_no_temp_file(tmp_path):
    target = tmp_path / "stats.json"
    write_json_atomic(target, {"ok": 1})
    with pytest.raises(StatsError, match="not a finite number"):  # one line, not a ValueError
        write_json_atomic(target, {"bad": math.nan})
    assert json.loads(target.read_text()) == {"ok": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stats.json"]


# ---- honest labels ---------------------------------------------------------------------------------

NOT_CERTIFIED = [e for e in EVALUABLE if e.kind != "certified"]
CERTIFIED = [e for e in EVALUABLE if e.kind == "certified"]


def _flat(text: str) -> str:
    """Table text without box drawing and line breaks (a label may be wrapped in a cell)."""
    for ch in "│┃┏┓┗┛┡┩└┘┌┐├┤┬┴┼─━╭╮╰╯═║╔╗╚╝":
        text = text.replace(ch, " ")
    return " ".join(text.split()).lower()


def _has_vacuous_row(flat_table: str) -> bool:
    return "vacuous yes" in flat_table or "vacuous no" in flat_table


def _set_args(values: dict) -> list[str]:
    args = []
    for k, v in values.items():
        v = np.asarray(v).tolist()
        args += ["--set", f"{k}={json.dumps(v)}"]
    return args


def _latex_label(tex: str) -> str:
    """The text of the document's \\item[Label] line, lower case."""
    lines = [ln for ln in tex.splitlines() if ln.strip().startswith(r"\item[Label]")]
    assert len(lines) >= 1, "no Label item in the LaTeX document"
    return lines[0].split("]", 1)[1].strip().lower()


def _latex_document():
    try:
        from boundcalc.report.latex import latex_document
    except ImportError:
        return None
    return latex_document


@pytest.mark.parametrize("entry", NOT_CERTIFIED, ids=[e.id for e in NOT_CERTIFIED])
def test_rate_or_proxy_is_never_a_certified_bound(entry):
    values = typical_values(entry)
    r = bc.evaluate(entry, values)
    j = r.to_json()
    assert j["is_bound"] is False and j["vacuous"] is None
    assert "certified" not in j["label"].lower()
    assert j["label"].startswith(entry.kind)
    # the rich table of `boundcalc evaluate` and its --json output
    res = runner.invoke(app, ["evaluate", entry.id, *_set_args(values)])
    assert res.exit_code == 0, res.output[-2000:]
    table = _flat(res.stdout)
    assert "label certified bound" not in table and not _has_vacuous_row(table)
    if entry.kind == "conditional":  # the panel lists the conditions in rows of their own
        # (hand-set inputs of a measured-point entry add "estimated ... and " in front)
        assert re.search(r"label (estimated \(.*?\) and )?conditional: an upper bound only if "
                         r"the conditions below hold", table)
        assert all(f"condition {c.lower()}" in table for c in r.conditions)
    else:
        assert f"label {r.label.lower()}" in table
    res = runner.invoke(app, ["evaluate", entry.id, *_set_args(values), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["is_bound"] is False
    # LaTeX: the label item (notes quoted from the paper may mention bounds in prose)
    latex_document = _latex_document()
    if latex_document is not None:
        label = _latex_label(latex_document(entry, r))
        assert "certified" not in label and entry.kind in label


def test_certified_entry_is_labelled_certified_in_every_format():
    """Control for the test above: the same checks see the label when it is there."""
    e = REGISTRY.get("mcallester")
    values = {"emp_risk": 0.05, "KL": 50.0, "n": 10000}
    r = bc.evaluate(e, values)
    assert r.to_json()["is_bound"] is True and r.to_json()["label"] == "certified bound"
    res = runner.invoke(app, ["evaluate", "mcallester", *_set_args(values)])
    assert "label certified bound" in _flat(res.stdout)
    latex_document = _latex_document()
    if latex_document is not None:
        assert _latex_label(latex_document(e, r)) == "certified bound"


def _stats_for(entry, estimated: str | None) -> tuple[dict, dict]:
    """A stats document holding every scalars.*/groups.* path ``entry`` binds (typical values;
    ``estimated`` names the symbol whose quantity is a stochastic estimate), plus --set values
    for the rest."""
    values = typical_values(entry)
    scalars, groups, rest, curves = {}, {}, {}, {}
    for name, s in entry.symbols.items():
        v = values.get(name)
        if s.stat and s.stat.startswith("scalars.") and v is not None:
            q = {"value": float(v)}
            if name == estimated:
                q.update(estimated=True, stderr=0.01, method="hutchinson, 100 probes",
                         ci=[float(v) * 0.9, float(v) * 1.1], confidence=0.95)
            scalars[s.stat.split(".", 1)[1]] = q
        elif s.stat and s.stat.startswith("groups.") and v is not None:
            groups[s.stat.split(".", 1)[1]] = np.asarray(v, dtype=float).tolist()
        elif s.stat and s.stat.startswith("curves.") and v is not None:
            # measured at one point of the entry's measured parameter (a hand-set value
            # would be labelled estimated)
            param = next(p for p in entry.parameters.values() if p.measured)
            curves[s.stat.split(".", 1)[1]] = {"param": param.name,
                                               "at": [float(values[param.name])],
                                               "value": [float(v)]}
        elif v is not None:
            rest[name] = v
    rest.update({k: v for k, v in values.items() if k in entry.parameters})
    doc = {"schema": "boundcalc.stats", "version": 1, "model": {}, "matrices": [],
           "scalars": scalars}
    if curves:
        doc["curves"] = curves
    if groups:
        n = len(next(iter(groups.values())))
        doc["groups"] = {"names": [f"g{i}" for i in range(n)], "stats": groups,
                         "estimated": {k: True for k in groups
                                       if any(s.name == estimated and s.stat == f"groups.{k}"
                                              for s in entry.symbols.values())}}
    return doc, rest


def _estimable(entry):
    return [s.name for s in entry.symbols.values() if s.stat and not s.indexed
            and s.stat.startswith("scalars.") and s.role == "measured"
            and s.name not in entry.estimated_inputs_ok]


ESTIMABLE = [e for e in CERTIFIED if _estimable(e)]


@pytest.mark.parametrize("entry", ESTIMABLE, ids=[e.id for e in ESTIMABLE])
def test_certified_entry_with_an_estimated_input_is_marked_estimated_everywhere(entry,
                                                                                tmp_path):
    name = _estimable(entry)[0]
    doc, rest = _stats_for(entry, estimated=name)
    path = tmp_path / "stats.json"
    path.write_text(json.dumps(doc))
    r = bc.compute(entry, load_stats(path), rest)
    j = r.to_json()
    assert j["estimated"] is True and j["is_bound"] is False and j["vacuous"] is None
    assert "estimated" in j["label"] and j["label"] != "certified bound"
    assert any(x.startswith(f"{name}:") and "hutchinson" in x for x in j["estimated_inputs"])
    res = runner.invoke(app, ["evaluate", entry.id, "--stats", str(path), *_set_args(rest)])
    assert res.exit_code == 0, res.output[-2000:]
    table = _flat(res.stdout)
    assert "label certified bound" not in table and "label estimated" in table
    assert "estimated inputs" in table and not _has_vacuous_row(table)
    res = runner.invoke(app, ["evaluate", entry.id, "--stats", str(path), *_set_args(rest),
                              "--json"])
    assert json.loads(res.stdout)["estimated"] is True
    latex_document = _latex_document()
    if latex_document is not None:
        tex = latex_document(entry, r)
        assert "certified" not in _latex_label(tex) and "estimated" in _latex_label(tex)
        assert "hutchinson" in tex
    # control: the same file with the flag off is a certified bound again
    doc, rest = _stats_for(entry, estimated=None)
    r2 = bc.compute(entry, stats_from_json(doc), rest)
    assert r2.estimated is False and r2.value == r.value
    assert r2.is_bound or r2.failed_assumptions


def test_estimated_sweep_covers_the_pac_bayes_entries():
    ids = {e.id for e in ESTIMABLE}
    for must in ("mcallester", "pac_bayes_kl"):
        if must in REGISTRY:
            assert must in ids
