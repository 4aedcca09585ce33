"""Long stages say how fast they go (issue 29 item 7): off a terminal, measure's progress
speaks at least every 10 s within a stage (not only at its quarters), with steps/s and an ETA."""

from __future__ import annotations

from boundcalc.cli import progress as prog


def test_progress_speaks_every_10_s_with_rate_and_eta(monkeypatch, capsys):
    clock = {"t": 1000.0}
    monkeypatch.setattr(prog.time, "monotonic", lambda: clock["t"])
    st = prog.Stages("measure")
    st.quiet, st.terminal, st.after = False, False, 0.0
    report = st.measure_progress("m")
    lines, when = [], []
    for done in range(0, 41):  # 40 steps of 3 s: quarters every 75 s
        report(done, 100, "Gibbs risk σ=0.01, 2048 samples per step")
        new = capsys.readouterr().err.splitlines()
        lines += new
        when += [clock["t"]] * len(new)
        clock["t"] += 3.0
    # a message as soon as 10 s have passed (the next step after them): never more than
    # 10 s + one step of silence, where the quarters alone would leave 75 s
    gaps = [b - a for a, b in zip(when, when[1:])]
    assert len(lines) >= 10 and max(gaps) <= 10 + 3
    last = lines[-1]
    assert int(last.split("measuring m: ")[1].split("/")[0]) >= 36  # within 10 s + a step
    assert "0.333 steps/s" in last and "ETA" in last
    eta = float(last.split("ETA ")[1].split(" s")[0])
    done = int(last.split("measuring m: ")[1].split("/")[0])
    assert abs(eta - (100 - done) * 3) <= 1


def test_a_stage_first_heard_of_part_done_has_no_invented_rate(monkeypatch, capsys):
    """Issue 44: the first line of a stage reported at done > 0 read '1e+09 steps/s' (the steps
    done before the stage's clock started divided by 1e-9 s). Its rate counts only steps done
    after that: none on its first line, 2 steps in 4 s = 0.5 steps/s later."""
    clock = {"t": 50.0}
    monkeypatch.setattr(prog.time, "monotonic", lambda: clock["t"])
    st = prog.Stages("measure")
    st.quiet, st.terminal, st.after = False, False, 0.0
    report = st.measure_progress("m")
    report(5, 8, "Gibbs risk")  # a new stage, first heard of with 5 of 8 steps done
    first = capsys.readouterr().err
    assert "5/8 steps" in first and "steps/s" not in first
    clock["t"] += 4.0
    report(7, 8, "Gibbs risk")  # the next quarter: 2 steps in 4 s
    second = capsys.readouterr().err
    assert "0.5 steps/s" in second and "ETA 2 s" in second
