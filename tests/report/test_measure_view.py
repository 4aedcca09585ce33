"""What `measure` prints (report/measure_view.py), on stats files written by hand: the values
in the tables, the σ notes in the caller's words, text from the file printed as written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rich.console import Console

from boundcalc import words
from boundcalc.cli.words import CLI_WORDS
from boundcalc.report.measure_view import measure_summary, print_data, print_weights, snap_notes
from boundcalc.stats import Curve, MatrixStats, Quantity, Stats

SNAPS = [{"requested": 0.01, "used": 0.00998878, "j": 691, "moved": True},
         {"requested": 0.0123, "used": 0.0123229, "j": 649, "moved": True},
         {"requested": 0.01231, "used": 0.0123229, "j": 649, "moved": True},
         {"requested": 0.1, "used": 0.1, "j": 230, "moved": False}]


def _console() -> Console:
    return Console(record=True, width=160, color_system=None)


def _data_stats() -> Stats:
    st = Stats()
    st.scalars.update(n=Quantity(40.0), emp_risk=Quantity(0.125),
                      hessian_trace=Quantity(12.5, ci=(10.25, 14.75)))
    st.curves["gibbs_risk_mean"] = Curve(
        "sigma", np.array([0.00998878, 0.0123229]), np.array([0.15, 0.175]),
        ci=np.array([[0.15, 0.21], [0.175, 0.23]]), confidence=0.99, estimated=True,
        n_samples=80)
    st.provenance.update(data="runs/[red]S[/red].csv", task="sequence_classification",
                         prior_note="no prior", gibbs_mode="sample",
                         precision={"data_side": "bf16"}, sigma_snapped=SNAPS)
    return st


def test_snap_notes_name_sigma_in_the_callers_words():
    assert snap_notes(SNAPS) == [
        "sigma=0.01 measured at grid point σ = 0.00998878 (j = 691)",
        "sigma=0.0123 measured at grid point σ = 0.0123229 (j = 649)",
        "sigma=0.01231 shares grid point j = 649 with 0.0123"]
    with words.use_words(CLI_WORDS):
        assert snap_notes(SNAPS)[2] == "--sigma 0.01231 shares grid point j = 649 with 0.0123"


def test_print_data_shows_the_values_and_the_file_text_as_written():
    con = _console()
    print_data(_data_stats(), Path("out/[b]s.json"), con)
    text = con.export_text()
    lines = text.splitlines()
    assert lines[0] == "data: runs/[red]S[/red].csv (40 samples, task sequence_classification)"
    # no prior centre recorded: the stored note (keywords) is not shown; the hint is said afresh
    # in the caller's words (here the API's: 'no init: …')
    from boundcalc.prior_spec import hint

    assert lines[1] != "no prior" and lines[1].startswith("no init: no prior centre")
    assert " ".join(hint().split()) in " ".join(text.split())
    assert any("0-1 risk" in ln and "0.125" in ln and "emp_risk" in ln for ln in lines)
    assert any("tr H" in ln and "12.5 [10.2, 14.8]" in ln for ln in lines)
    assert "Monte Carlo Gibbs risk (N = 80 losses per σ, sample mode, bf16 arithmetic)" in \
        " ".join(text.split())
    # the kl upper end, an upper confidence limit, is rounded up (4 digits): the doubles 0.21
    # and 0.23 are 0.2099999… and 0.2300000…1, so 0.21 and 0.2301
    cells = [[c.strip() for c in ln.strip("│ ").split("│")] for ln in lines if "│" in ln]
    assert ["0.009989", "0.1500", "0.21"] in cells
    assert ["0.01232", "0.1750", "0.2301"] in cells
    assert "kl upper (99%)" in text
    assert "  note: sigma=0.0123 measured at grid point σ = 0.0123229 (j = 649)" in lines
    assert lines[-1] == "wrote out/[b]s.json"
    con = _console()
    print_data(_data_stats(), Path("s.json"), con, sigma_given=False)  # default σ: no notes
    assert "note:" not in con.export_text()


def test_print_weights_means_per_type_and_the_prior_line():
    st = Stats(model={"architecture": "bert", "n_layers": 2, "n_heads": 4, "n_kv_heads": 4,
                      "hidden": 32, "head_dim": 8, "intermediate": 64, "n_params": 12345},
               matrices=[MatrixStats("q", 0, None, "a", (32, 32), {"spectral": 1.0, "rank": 4}),
                         MatrixStats("q", 1, None, "b", (32, 32), {"spectral": 3.0,
                                                                   "rank": float("nan")})],
               layer_map=[{"name": "a", "role": "q", "layer": 0, "group": "layer.0"},
                          {"name": "b", "role": "q", "layer": 1, "group": "layer.1"}],
               scalars={"hidden": Quantity(32.0), "depth_proxy": Quantity(0.5)},
               provenance={"prior": {"summary": "prior centre: zero"}})
    con = _console()
    print_weights(st, Path("w.json"), con)
    lines = con.export_text().splitlines()
    assert lines[0] == ("bert: 2 layers x 4 heads (kv 4), hidden 32, head dim 8, intermediate "
                        "64, 12,345 parameters")
    assert lines[1] == "layer map: q 2; excluded 0"
    row = next(ln for ln in lines if ln.strip().startswith("│ q"))
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[:3] == ["q", "2", "2"] and cells[5] == "4"  # mean spectral 2; rank: NaN skipped
    assert "  depth_proxy = 0.5" in lines and not any("hidden =" in ln for ln in lines)
    assert lines[-2:] == ["prior centre: zero", "wrote w.json"]


def test_the_json_summary_carries_curves_only_for_the_data_side():
    st = _data_stats()
    plain = measure_summary(st, Path("x.json"), data_side=False)
    assert "curves" not in plain and plain["scalars"]["n"] == {"value": 40.0}
    full = measure_summary(st, Path("x.json"), data_side=True)
    assert full["curves"]["gibbs_risk_mean"]["n_samples"] == 80
    assert full["provenance"]["sigma_snapped"] == SNAPS
