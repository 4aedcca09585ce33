"""A program's own JSON records through files/ (issue 41 item 4: certify reads and writes
through the ground floor): written with write_json_record, read back with
read_json(..., finite=False) as json.dumps wrote them (NaN included, which a user's file may not
hold); JSON Lines read one value per '\\n'-ended line, strictly, naming the line; hash_into feeds
a file's bytes to a digest, as hashlib over the bytes does."""

from __future__ import annotations

import hashlib
import json
import math

import pytest

from boundcalc.errors import BoundcalcError, OutputError
from boundcalc.files import hash_into, read_json, read_json_lines, write_json_record


def test_a_record_round_trips_as_json_dumps_wrote_it(tmp_path):
    rec = {"a": [1, 2.5], "b": None, "path": tmp_path, "nan": math.nan}
    p = write_json_record(tmp_path / "r.json", rec)
    assert p.read_text() == json.dumps(rec, indent=1, default=str)
    back = read_json(p, 1 << 16, OutputError, "record", finite=False)
    assert back["a"] == [1, 2.5] and back["path"] == str(tmp_path) and math.isnan(back["nan"])
    with pytest.raises(OutputError, match="non-finite constant NaN"):
        read_json(p, 1 << 16, OutputError, "record")  # a user's file: strict


def test_json_lines_one_value_per_newline_strict_and_named(tmp_path):
    p = tmp_path / "s.jsonl"
    rows = [{"text": "a\u2028b", "label": 1}, {"text": "c\x0cd", "label": 0}]
    p.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows) + "\n",
                 encoding="utf-8")
    assert read_json_lines(p, BoundcalcError, "split") == rows
    p.write_text('{"text": "a"}\n{"text": "a", "text": "b"}\n', encoding="utf-8")
    with pytest.raises(BoundcalcError, match=r"s.jsonl, line 2: key 'text' appears twice"):
        read_json_lines(p, BoundcalcError, "split")
    p.write_bytes(b'{"text": "\xff"}\n')
    with pytest.raises(BoundcalcError, match="not UTF-8"):
        read_json_lines(p, BoundcalcError, "split")


def test_hash_into_is_the_digest_of_the_bytes(tmp_path):
    data = bytes(range(256)) * 5000  # over one block of 1 MiB
    (tmp_path / "f").write_bytes(data)
    h = hashlib.sha256(b"prefix")
    hash_into(h, tmp_path / "f")
    assert h.hexdigest() == hashlib.sha256(b"prefix" + data).hexdigest()
