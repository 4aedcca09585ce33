"""boundcalc/files/manifest.py: a step's outputs are reused only as the recorded bytes; the
hashes are checked against hashlib computed here, file by file."""

from __future__ import annotations

import hashlib
import json

import pytest

from boundcalc.errors import OutputError
from boundcalc.files.manifest import Manifest, output_hashes


def _folder(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "w.bin").write_bytes(b"\x00" * 10)
    (tmp_path / "m" / "sub").mkdir()
    (tmp_path / "m" / "sub" / "c.json").write_text("{}")
    (tmp_path / "s.jsonl").write_text("row\n")
    return tmp_path


def test_hashes_by_relative_path_and_a_link_is_not_followed(tmp_path):
    w = _folder(tmp_path)
    (w / "elsewhere").write_text("x")
    (w / "link").symlink_to(w / "elsewhere")
    sha = {name: hashlib.sha256(data).hexdigest()
           for name, data in (("m/w.bin", b"\x00" * 10), ("m/sub/c.json", b"{}"),
                              ("s.jsonl", b"row\n"))}
    assert output_hashes(w, ["m", "s.jsonl", "missing", "link"]) == sha


@pytest.mark.parametrize("edit,why", [
    (lambda w: (w / "m" / "w.bin").write_bytes(b"\x01" * 10), "m/w.bin is not the file it wrote"),
    (lambda w: (w / "m" / "extra").write_text(""), "m/extra was not written by it"),
    (lambda w: (w / "s.jsonl").unlink(), "s.jsonl is missing"),
])
def test_a_changed_output_is_named(tmp_path, edit, why):
    w = _folder(tmp_path)
    m = Manifest(w, "run.json", "test run")
    assert m.changed("a", "k1", ["m", "s.jsonl"]) == "not finished before"
    m.record("a", "k1", ["m", "s.jsonl"])
    assert m.changed("a", "k1", ["m", "s.jsonl"]) is None
    assert m.changed("a", "k2", ["m", "s.jsonl"]) == "its inputs or settings changed"
    again = Manifest(w, "run.json", "test run")
    again.load()  # the record survives the process, as written
    assert again.steps == m.steps
    edit(w)
    assert again.changed("a", "k1", ["m", "s.jsonl"]).startswith(why)
    again.forget(["a", "b"])
    assert json.loads((w / "run.json").read_text())["steps"] == {}


@pytest.mark.parametrize("text", ['{"format": "another run", "steps": {}}', "[]",
                                  '{"format": "test run", "steps": {"a": {"key": 1}}}'])
def test_a_record_that_is_not_this_programs_is_refused(tmp_path, text):
    (tmp_path / "run.json").write_text(text)
    with pytest.raises(OutputError, match="run.json: not a manifest of test run"):
        Manifest(tmp_path, "run.json", "test run").load()
