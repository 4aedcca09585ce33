"""The stats file's ``curves`` section: statistics measured at points of a free parameter."""

import json

import numpy as np
import pytest

from boundcalc.errors import StatsError
from boundcalc.stats import Curve, Stats, load_stats, stats_from_json


def _doc(curves):
    return {"schema": "boundcalc.stats", "version": 1, "model": {}, "matrices": [],
            "scalars": {}, "curves": curves}


def test_round_trip(tmp_path):
    c = Curve(param="sigma", at=np.array([0.01, 0.02]), value=np.array([0.1, 0.2]),
              ci=np.array([[0.05, 0.15], [0.1, 0.3]]), confidence=0.99, estimated=True,
              n_samples=500, method="Monte Carlo")
    path = Stats(curves={"gibbs_risk": c}).save(tmp_path / "s.json")
    back = load_stats(path).curves["gibbs_risk"]
    assert back.param == "sigma" and back.n_samples == 500 and back.estimated
    assert back.at.tolist() == [0.01, 0.02] and back.value.tolist() == [0.1, 0.2]
    assert back.ci.tolist() == [[0.05, 0.15], [0.1, 0.3]]
    assert "curves" not in Stats().to_json()  # optional: absent when empty


@pytest.mark.parametrize("curve, culprit", [
    ({"param": "sigma", "at": [0.1], "value": [1, 2]}, "2 values"),
    ({"param": "sigma", "at": [0.1, 0.1], "value": [1, 2]}, "repeated"),
    ({"param": "sigma", "at": [], "value": []}, "non-empty"),
    ({"param": "1x", "at": [0.1], "value": [1]}, "param"),
    ({"param": "sigma", "at": [0.1], "value": [1], "ci": [[2, 3]]}, "does not contain"),
    ({"param": "sigma", "at": [0.1], "value": [1], "n_samples": 0}, "n_samples"),
    ({"at": [0.1], "value": [1]}, "'param'"),
])
def test_bad_curves_name_the_field(curve, culprit):
    with pytest.raises(StatsError, match=culprit) as info:
        stats_from_json(json.loads(json.dumps(_doc({"P_hat": curve}))))
    assert "curves.P_hat" in str(info.value)
