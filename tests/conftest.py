"""Test-wide settings: offline Hugging Face, headless matplotlib, deterministic torch and
Hypothesis.

Hypothesis runs deterministically by default (profile ``ci``: ``derandomize=True``, no example
database), so one commit passes or fails the same way every time; ``.ci/run`` names the profile
explicitly. Random exploration is a separate, documented command (README, "Testing"):

    python -m pytest -m hypothesis --hypothesis-scale 100

runs every property test with 100 times its examples, drawn at random.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# the studies (studies/, outside the package) import from the repository root
if str(Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.append(str(Path(__file__).resolve().parents[1]))
# test modules that tests in other rooms import from (`from test_optimize_sensitivity import
# spectrum_stats`, `from test_spectrum_adaptive import random_bert`), whichever runs first
for _room in ("optimize", "formulas"):
    sys.path.append(str(Path(__file__).resolve().parent / _room))

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

settings.register_profile("ci", derandomize=True, database=None)
settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _fixed_global_seeds():
    """Every test starts from the same global random state (Python, NumPy, torch), so a test
    that draws without its own generator gives the same outcome on every run."""
    import numpy as np
    import torch

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _default_budgets():
    """Every test starts from the default memory and time budgets: no override left by an
    earlier test, and no 'largest tensor seen' grown by a model an earlier test loaded (the
    default memory budget is 1 GiB plus that tensor)."""
    from boundcalc import limits

    limits._state.update(override=None, largest_tensor=0, time=None)


def pytest_addoption(parser):
    parser.addoption("--hypothesis-scale", type=int, default=None, metavar="K",
                     help="run every Hypothesis test with K times its max_examples, at random "
                          "(derandomize off; K = 1 too); for the property-test campaign "
                          "(benchmarks/property_campaign.py), not for CI")


def pytest_collection_modifyitems(config, items):
    scale = config.getoption("--hypothesis-scale")
    if scale is None:
        return
    if scale < 1:
        raise pytest.UsageError(f"--hypothesis-scale must be at least 1, got {scale}")
    for item in items:
        fn = getattr(item, "obj", None)
        if getattr(fn, "is_hypothesis_test", False):
            base = fn._hypothesis_internal_use_settings
            fn._hypothesis_internal_use_settings = settings(
                base, max_examples=base.max_examples * scale, derandomize=False, database=None)


@pytest.fixture(scope="session")
def registry():
    """The bundled registry (formulas/)."""
    import boundcalc as bc

    return bc.load_registry()
