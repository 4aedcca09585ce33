"""Fixtures of the reliability tests (issue 32): a tiny BERT classifier, a nearby prior
checkpoint, DATA and a disjoint tune split, and one stats file measured from them with every
Monte Carlo record (``gibbs_risk_mean`` and the per-group ``gibbs_risk_groups``).

The folder's tests import the shared helpers as ``tests._measure_helpers`` (the repository root
is on ``sys.path``: pytest's rootdir, or ``python -m pytest`` from it); this conftest makes sure
of it, so the folder also runs on its own (``pytest tests/reliability``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests._measure_helpers import TEXT_LABELS, TEXTS, single_thread, tiny_text_checkpoints  # noqa: E402
from tests.reliability._rel_helpers import MEASURE, TUNE_LABELS, TUNE_TEXTS  # noqa: E402


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """``cls`` (3-class BERT), ``prior`` (cls + small noise), ``d.csv`` (DATA, 6 rows),
    ``t.csv`` (a disjoint tune split, 6 rows)."""
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    out = tmp_path_factory.mktemp("rel")
    with single_thread():
        tiny_text_checkpoints(out)
        m = BertForSequenceClassification.from_pretrained(out / "cls")
        gen = torch.Generator().manual_seed(5)
        with torch.no_grad():
            for p in m.parameters():
                p.add_(0.01 * torch.randn(p.shape, generator=gen))
        m.save_pretrained(out / "prior")
        AutoTokenizer.from_pretrained(out / "cls").save_pretrained(out / "prior")
    pd.DataFrame({"sentence": TEXTS, "label": TEXT_LABELS}).to_csv(out / "d.csv", index=False)
    pd.DataFrame({"sentence": TUNE_TEXTS, "label": TUNE_LABELS}).to_csv(out / "t.csv",
                                                                      index=False)
    return out


@pytest.fixture(scope="session")
def group_stats(tiny):
    """(path, parsed JSON) of ``measure cls --init prior --data d.csv --tune-data t.csv``."""
    from tests._cli_helpers import invoke

    path = tiny / "g.json"
    with single_thread():
        res = invoke("-q", "measure", tiny / "cls", "--init", tiny / "prior", "--data",
                     tiny / "d.csv", "--tune-data", tiny / "t.csv", *MEASURE, "-o", path,
                     "--json")
    assert res.exit_code == 0, res.output[-2000:]
    return path, json.loads(path.read_text())
