"""A stats file's provenance record with a number beyond double precision (JSON integers are
unbounded) is refused in one line naming the field: each of these raised Python's OverflowError
(`internal error (OverflowError: int too large to convert to float)`, exit 70, from the
whole-file checks; a traceback from `dist_sq`) before they went through
``files.as_finite_float``."""

from __future__ import annotations

import copy
import json

import pytest

from tests._cli_helpers import invoke
from tests.reliability._rel_helpers import one_line_error
from tests.reliability.test_stats_files import GROUPS, _edited

HUGE = 10 ** 400


def _set(*path):
    *keys, last = path

    def edit(doc):
        node = doc["provenance"]["gibbs_groups"]
        for k in keys:
            node = node[k]
        node[last] = HUGE
    return edit


@pytest.mark.parametrize("path, needle", [
    (("mc", "passes"), "provenance.gibbs_groups.mc.passes: expected a positive integer"),
    (("mc", "samples_per_pass"),
     "provenance.gibbs_groups.mc.samples_per_pass: expected a positive integer"),
    (("scale",), "provenance.gibbs_groups.scale: expected a finite number"),
    (("shape", 0), "provenance.gibbs_groups: shape[0] = ρ = 10000000000000000000 does not match"),
    (("sigma", 0), "does not match the recorded σ_g = 10000000000000000000"),
])
def test_a_huge_number_in_the_groups_record_is_refused_on_load(group_stats, tmp_path, path,
                                                               needle):
    err = one_line_error(invoke("compare", "--stats", _edited(group_stats, tmp_path, _set(*path))),
                         5)
    assert needle in err and len(err) < 400, err


def test_a_huge_distance_refuses_the_entry_that_reads_it(group_stats, tmp_path):
    """dist_sq is read when the entry is evaluated: the entry is refused, naming the field."""
    path = _edited(group_stats, tmp_path, _set("dist_sq", 0))
    err = one_line_error(invoke("evaluate", GROUPS, "--stats", path), 5)
    assert "provenance.gibbs_groups.dist_sq[0]: expected a non-negative finite number" in err
    res = invoke("compare", "--stats", path)  # the other entries are still compared
    assert res.exit_code == 0 and "Traceback" not in res.output
    assert f"{GROUPS}: not computed:" in res.stdout and "dist_sq[0]" in res.stdout


def test_rows_per_unit_is_not_read_in_sample_mode(group_stats, tmp_path):
    """A field the record's mode does not use is not checked (control: the record is 'sample')."""
    _, doc = group_stats
    assert doc["provenance"]["gibbs_groups"]["mc"]["mode"] == "sample"
    res = invoke("compare", "--stats", _edited(group_stats, tmp_path, _set("mc", "rows_per_unit")))
    assert res.exit_code == 0, res.output[-800:]


def _numeric_leaves(node, path=()):
    """Paths of the numbers in a JSON document (of a list: its first and last item)."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _numeric_leaves(v, (*path, k))
    elif isinstance(node, list) and node:
        for i in sorted({0, len(node) - 1}):
            yield from _numeric_leaves(node[i], (*path, i))
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        yield path


def test_every_number_of_a_measured_file_set_beyond_double_precision(group_stats, tmp_path):
    """Each numeric leaf of a real measured stats file, one at a time, set to 10**400 (curves
    re-hashed so the edit reaches the checks behind the hash): `compare` refuses the file in
    one line or reports the rows it cannot compute; never an internal error or a traceback.
    On the code before this file's fix, 10 of the 138 leaves failed this."""
    from boundcalc.stats_checks import curves_digest

    _, doc = group_stats
    paths = list(_numeric_leaves(doc))
    assert len(paths) > 100
    failures = []
    for i, path in enumerate(paths):
        edited = copy.deepcopy(doc)
        node = edited
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = HUGE
        if path[0] == "curves" and "curves_sha256" in edited:
            edited["curves_sha256"] = curves_digest(edited["curves"])
        file = tmp_path / f"e{i}.json"
        file.write_text(json.dumps(edited))
        res = invoke("compare", "--stats", file)
        if res.exit_code not in (0, 5) or "Traceback" in res.output or "internal error" in \
                res.output or not isinstance(res.exception, (SystemExit, type(None))):
            failures.append((path, res.exit_code, repr(res.exception)[:80]))
    assert failures == []
