#!/usr/bin/env bash
# Stage the benchmark baselines as wheels in .whl/ before a GPU run: a lent CUDA machine has no
# network, and gpu_check.sh installs what it lacks from .whl/ (carry .whl with the run). The
# last lent machine had torch, transformers and the scientific stack but not these.
#   bash benchmarks/stage_gpu_wheels.sh     # then: run bash benchmarks/gpu_check.sh, carrying .whl
# The MiniLM weights package (about 90 MB) is too large to carry; without it the spectra group
# times a synthetic checkpoint of the same shapes (benchmarks/README.md).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${PYTHON:-python3}"
mkdir -p "$root/.whl"
"$py" -m pip download -q --no-deps --only-binary=:all: -d "$root/.whl" \
  pyhessian==0.1 weightwatcher==0.7.7 powerlaw
du -sh "$root/.whl"
ls "$root/.whl"
