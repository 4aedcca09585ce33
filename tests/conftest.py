"""Test-wide settings: offline Hugging Face, headless matplotlib, deterministic torch."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def registry():
    """The bundled registry (formulas/)."""
    import boundcalc as bc

    return bc.load_registry()
