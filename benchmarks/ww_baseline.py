"""Baseline process for the whole-process benchmark: WeightWatcher ``analyze()`` (defaults) on the
weights of one safetensors file, as a user would run it: ``python ww_baseline.py model.safetensors``.
"""

import logging
import sys

import weightwatcher as ww
from safetensors.torch import load_file

logging.getLogger("weightwatcher").setLevel(logging.ERROR)
details = ww.WeightWatcher(model=load_file(sys.argv[1])).analyze()
print(f"{len(details)} layers analysed")
