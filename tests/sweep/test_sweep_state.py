"""A sweep's stored result (``done/<key>.json``) is used only if it has the shape the sweep
writes; a number no row holds (JSON integers are unbounded: 10**400) means recompute."""

from __future__ import annotations

import json

import pytest

from boundcalc.sweep.run import _stored_result

GOOD = {"ok": True, "seconds": 1.25,
        "rows": [{"id": "mcallester", "value": 0.42, "kind": "certified", "n": 1000,
                  "estimated": False, "vacuous": None}]}


def _folder(tmp_path, doc):
    (tmp_path / "stats").mkdir(exist_ok=True)
    (tmp_path / "done").mkdir(exist_ok=True)
    (tmp_path / "stats" / "k.json").write_text("{}")
    (tmp_path / "done" / "k.json").write_text(json.dumps(doc))
    return tmp_path


def test_a_stored_result_of_the_written_shape_is_used(tmp_path):
    assert _stored_result(_folder(tmp_path, GOOD), "k") == GOOD


@pytest.mark.parametrize("bad", [
    {**GOOD, "seconds": 10 ** 400},
    {**GOOD, "rows": [{**GOOD["rows"][0], "n": 10 ** 400}]},
    {**GOOD, "rows": [{**GOOD["rows"][0], "value": -10 ** 400}]},
    {**GOOD, "seconds": True},
])
def test_a_number_beyond_double_precision_means_recompute(tmp_path, bad):
    assert _stored_result(_folder(tmp_path, bad), "k") is None
