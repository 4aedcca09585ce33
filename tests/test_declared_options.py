"""Options as declared records (boundcalc/options.py; not named test_options.py, which is
reliability/test_options.py): the rule of a declaration in words, the values it accepts, and
— generated from the declarations of every record — each bad value of each field refused with
exit 2 (or the exit code its declaration names) and one line naming the option in the
caller's words: the field's keyword through the API, its flag through the CLI (measure,
certify)."""

from __future__ import annotations

import ast
import math
from dataclasses import FrozenInstanceError, dataclass, fields
from pathlib import Path

import pytest
from typer.testing import CliRunner

from boundcalc import words
from boundcalc.certify.config import CertifyConfig
from boundcalc.cli import app
from boundcalc.cli.words import CLI_WORDS, flag
from boundcalc.errors import BoundcalcError
from boundcalc.measure.compress.options import CompressOptions
from boundcalc.measure.data.gibbs import MonteCarlo
from boundcalc.measure.data.options import BoundTraining, MeasureOptions
from boundcalc.optimize.core import Options
from boundcalc.options import Record, Spec, declared, like, spec

ROOT = Path(__file__).resolve().parent.parent


def test_a_rule_in_words_by_hand():
    assert Spec(int, low=0).rule() == "a whole number >= 0"
    assert Spec(float, low=0, high=1, open_low=True, open_high=True).rule() == \
        "a number in (0, 1)"
    assert Spec(float, low=0, high=1, open_high=True).rule() == "a number in [0, 1)"
    assert Spec(int, low=0, but_not=(1,)).rule() == "a whole number >= 0 other than 1"
    assert Spec(str, choices=("a", "b")).rule() == "one of a, b"
    assert Spec(float, low=0, open_low=True, many=True).rule() == \
        "one or more values, each a positive number"
    assert Spec(float, low=1, open_low=True).rule() == "a number > 1"


def test_what_a_spec_accepts_by_hand():
    whole = Spec(int, low=1, high=3)
    assert [whole.accepts(v) for v in (0, 1, 3, 4, 2.0, True)] == \
        [False, True, True, False, False, False]
    real = Spec(float, low=0, high=1, open_low=True)
    assert [real.accepts(v) for v in (0.0, 1e-300, 1, 1.5, math.nan, math.inf)] == \
        [False, True, True, False, False, False]
    bits = Spec(int, choices=(16, 32))
    assert [bits.accepts(v) for v in (16, 8, "16", True)] == [True, False, False, False]


@dataclass(frozen=True)
class _Toy(Record):
    count: int = spec(2, Spec(int, low=1, help="how many; see {rate}"))
    rate: float = like(CertifyConfig, "prior_fraction", 0.25)


def test_a_record_checks_itself_in_one_wording():
    assert _Toy().count == 2 and _Toy().rate == 0.25
    with pytest.raises(BoundcalcError) as got:
        _Toy(count=0)
    assert str(got.value) == "count=0: expected a whole number >= 1"
    with words.use_words(CLI_WORDS), pytest.raises(BoundcalcError) as got:
        _Toy(rate=1.0)  # declared by reference: CertifyConfig's rule, another default
    assert str(got.value) == "--rate 1.0: expected a number in (0, 1)"
    with pytest.raises(FrozenInstanceError):
        _Toy().count = 3
    assert _Toy.of(_Toy(count=5), rate=0.5) == _Toy(count=5, rate=0.5)
    spec_ = dict((f.name, s) for f, s in declared(_Toy))["count"]
    assert spec_.help_text() == "how many; see rate"
    assert spec_.help_text(flag) == "how many; see --rate"


def _exit(record, name: str) -> int:
    return next(s.error for f, s in declared(record) if f.name == name).exit_code


RECORDS = (MeasureOptions, CertifyConfig, CompressOptions, Options, MonteCarlo, BoundTraining)
CASES = [(record, f.name, bad) for record in RECORDS for f, s in declared(record)
         for bad in s.invalid()]


def test_every_declared_field_has_a_bad_value_or_is_free_text_or_a_switch():
    for record in RECORDS:
        for f, s in declared(record):
            assert s.invalid() or (s.kind in (str, bool) and s.choices is None), \
                (record.__name__, f.name)
            assert s.help, (record.__name__, f.name)  # every option says what it does


@pytest.mark.parametrize("record, name, bad", CASES,
                         ids=[f"{r.__name__}.{n}={b!r}" for r, n, b in CASES])
def test_api_refuses_every_bad_value_naming_the_keyword(record, name, bad):
    with pytest.raises(BoundcalcError) as got:
        record(**{name: bad})
    text = str(got.value)
    # exit 2, or the exit code its declaration names (σ outside its domain: 4, since round 3)
    assert got.value.exit_code == _exit(record, name)
    assert "\n" not in text and "--" not in text
    assert text.startswith(f"{name}="), text


# the commands whose options are generated from a record: (command, record, the words before
# the options; nothing there need exist, the record is checked first)
COMMANDS = [("certify", CertifyConfig, ["certify", "base", "--data", "d.csv"]),
            ("measure", MeasureOptions, ["measure", "model"]),
            ("measure", CompressOptions, ["measure", "model", "--data", "d.csv", "--compress",
                                          "all"])]
CLI_CASES = [(cmd, f.name, bad, head) for cmd, record, head in COMMANDS
             for f, s in declared(record) if s.kind is not str or s.choices is not None
             for bad in s.invalid() if bad != ()]  # free text and an empty list: not typed


def _typed(value):
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def _given(name: str, bad) -> list[str]:
    """The words of a bad value: one option per item, or one word of items where the
    declaration names a separator (--levels 0)."""
    s = next(s for r in RECORDS for f, s in declared(r) if f.name == name)
    values = bad if isinstance(bad, tuple) and not s.sep else (bad,)
    return [w for v in values for w in (flag(name), _typed(v))]


@pytest.mark.parametrize("cmd, name, bad, head", CLI_CASES,
                         ids=[f"{c}{flag(n)}={b!r}" for c, n, b, _ in CLI_CASES])
def test_cli_refuses_every_bad_value_naming_the_flag(cmd, name, bad, head, tmp_path):
    args = [*head, "-o" if cmd == "certify" else "--output", str(tmp_path / "out")]
    res = CliRunner().invoke(app, args + _given(name, bad))
    err = res.stderr.strip()
    record = next(r for c, r, _ in COMMANDS if c == cmd and name in {f.name for f in fields(r)})
    assert res.exit_code == _exit(record, name), (res.exit_code, res.output[-800:])
    assert err.startswith("error:") and "\n" not in err and "Traceback" not in res.output, err
    assert flag(name) in err, err
    assert not (tmp_path / "out").exists()


def _handwritten_flags(path: Path) -> set[str]:
    """Every flag spelled in a typer.Option(...) call of ``path``."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "Option":
            out |= {a.value for a in node.args if isinstance(a, ast.Constant)
                    and isinstance(a.value, str) and a.value.startswith("--")}
    return out


@pytest.mark.parametrize("cmd, record, _", COMMANDS,
                         ids=[f"{c}-{r.__name__}" for c, r, _ in COMMANDS])
def test_no_option_of_a_record_is_written_again_in_its_command(cmd, record, _):
    """A generated option's default, help and bound live in the declaration alone: the
    command's module spells none of those flags in a typer.Option of its own."""
    mine = _handwritten_flags(ROOT / "boundcalc" / "cli" / f"{cmd}_cmd.py")
    generated = {flag(f.name) for f, _ in declared(record)}
    assert not mine & generated, mine & generated


def test_certify_config_reads_the_data_side_declarations():
    """CertifyConfig's data-side fields are MeasureOptions' declarations (by reference), with
    certify's defaults: the same rule, written once."""
    m = {f.name: s for f, s in declared(MeasureOptions)}
    c = {f.name: s for f, s in declared(CertifyConfig)}
    for name in ("seed", "max_length", "batch_size", "text_column", "device", "sigmas",
                 "tune_draws"):
        assert c[name].rule() == m[name].rule(), name
    assert (c["draws"].low, m["draws"].low) == (1, 0)  # certify needs a pass per σ
    full = CertifyConfig(sigmas=(0.003, 0.01), group_draws=6, tune_rows=192)  # the full plan
    got = full.measure_options("t.jsonl")
    assert (got.sigmas, got.draws, got.tune_data, got.group_draws, got.hessian_probes) == \
        ((0.003, 0.01), 3, "t.jsonl", 6, 0)
    assert {f.name for f in fields(CertifyConfig)} >= {"prior_fraction", "tune_rows"}


def test_tune_draws_without_a_search_is_refused(tmp_path):
    res = CliRunner().invoke(app, ["certify", "base", "--data", "d.csv", "-o",
                                   str(tmp_path / "o"), "--tune-rows", "0", "--tune-draws", "5"])
    assert res.exit_code == 2
    assert res.stderr.strip() == ("error: --tune-draws does nothing with --tune-rows 0 (no σ "
                                  "search); leave --tune-draws out or give --tune-rows > 0")
