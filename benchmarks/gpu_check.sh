#!/usr/bin/env bash
# One-call GPU check for a lent CUDA machine (bare: python3, torch with CUDA and transformers; no
# network, maybe a newer Python; staged wheels in .whl/ are used only when that folder exists).
#   bash benchmarks/gpu_check.sh              # writes everything under $OUT (default ./gpu_check_out)
#   bash benchmarks/gpu_check.sh --self-test  # the same steps on the CPU with a tiny BERT (checks
#                                             # the script where no GPU is lent; not the speed)
# Budget GPU_CHECK_BUDGET_S (default 240 s), in this order, each step only with time left:
# 1. issue 29's acceptance case first: BERT-base classifier, 2048 x 128 ids, plain pass, then
#    5 sigma x 20 draws (a partial record bert_gpu.json after every sigma), 20 Hessian probes
#    (benchmarks/bench_bert_gpu.py), with 40 % of the budget;
# 1b. then GPT-2 (124M, GPT2Config(), saved and loaded back), 2048 x 256 ids, plain pass and
#    5 sigma x 20 draws (gpt2_gpu.json after every sigma; bench_bert_gpu.py --case gpt2), with
#    60 % of what is left;
# 2. weights side: measure of a synthetic BERT-base on CUDA vs the CPU, statistics compared
#    (bench_data_side.py --only weights);
# 3. benchmarks/gpu_check.py: CUDA results equal CPU results to 1e-6 (spectra, norms, Schatten
#    sums; Hutchinson and Hutch++ with fixed seeds), card recorded;
# 4. the spectra and Hessian groups of benchmarks/run (--quick), only where their baselines
#    (weightwatcher, pyhessian) are importable.
# Files come back under $OUT: bert_gpu.json, gpt2_gpu.json, gpu_check.json/.md, bench_data_side_weights/,
# bench_spectra/, bench_hessian/ (each written as soon as its records exist), log.txt, pip.txt.
# Exit status 0 when the CUDA/CPU comparisons passed (or were skipped without a GPU).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
out="${OUT:-$root/gpu_check_out}"
mkdir -p "$out"
py="${PYTHON:-python3}"
budget="${GPU_CHECK_BUDGET_S:-240}"
self_test=0
[ "${1:-}" = "--self-test" ] && self_test=1
start=$(date +%s)
log="$out/log.txt"
exec > >(tee -a "$log") 2>&1
cd "$root"
echo "gpu_check: $(date -u +%FT%TZ) on $(hostname), python $("$py" -V 2>&1), budget ${budget}s"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

# one process finds every missing module (one import each would cost seconds apiece)
read -r -a missing <<< "$("$py" -c '
import importlib.util as u
mods = "torch numpy scipy sympy safetensors threadpoolctl typer rich transformers weightwatcher pyhessian".split()
print(" ".join(m for m in mods if u.find_spec(m) is None))' 2>/dev/null)"
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
left() { echo $(( budget - ($(date +%s) - start) )); }
bench_ds() {  # bench_data_side.py part $1 with at most $2 seconds
  ( unset OMP_NUM_THREADS MKL_NUM_THREADS
    timeout "$2" "$py" "$here/bench_data_side.py" --device cuda --only "$1" --full-bert \
      --out "$out/bench_data_side_$1" )
  [ $? -eq 124 ] && echo "bench_data_side $1: stopped at ${2}s (records so far are kept)"
}
"$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" && cuda=1 || cuda=0
if [ $self_test -eq 1 ]; then
  echo "self-test: the BERT and GPT-2 cases on the CPU with tiny models"
  timeout "$(left)" "$py" "$here/bench_bert_gpu.py" --self-test --out "$out" || exit $?
  timeout "$(left)" "$py" "$here/bench_bert_gpu.py" --self-test --case gpt2 --out "$out"
  exit $?
fi
if [ $cuda -eq 1 ]; then  # the acceptance cases first, with most of the budget
  timeout $(( $(left) * 40 / 100 )) "$py" "$here/bench_bert_gpu.py" --out "$out"
  [ $? -eq 124 ] && echo "bench_bert_gpu: stopped at its time limit (bert_gpu.json keeps the sigmas done)"
  timeout $(( $(left) * 60 / 100 )) "$py" "$here/bench_bert_gpu.py" --case gpt2 --out "$out"
  [ $? -eq 124 ] && echo "bench_bert_gpu --case gpt2: stopped at its time limit (gpt2_gpu.json keeps the sigmas done)"
  [ "$(left)" -gt 40 ] && bench_ds weights $(( $(left) / 2 ))
else
  echo "no CUDA: the BERT case and the data-side benchmarks skipped"
fi
rc=0
if [ "$(left)" -gt 20 ]; then
  timeout $(( $(left) - 5 )) "$py" "$here/gpu_check.py" --out "$out"
  rc=$?
  [ $rc -eq 124 ] && echo "gpu_check.py: stopped at its time limit"
fi

# benchmark groups one at a time, each writing its own latest.json/.md (a group stopped at the
# budget writes nothing, the other keeps its results)
for group in spectra hessian; do
  base=$([ "$group" = spectra ] && echo weightwatcher || echo pyhessian)
  if ! "$py" -c "import $base" >/dev/null 2>&1; then
    echo "benchmarks: $group skipped ($base, its baseline, is not installed)"; continue
  fi
  l=$(left)
  [ "$group" = spectra ] && l=$(( l / 2 ))
  if [ $l -gt 45 ]; then
    echo "benchmarks: $group (--quick; CPU and CUDA) with ${l}s"
    ( export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
      unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
      timeout "$l" "$py" "$here/main.py" --quick --only "$group" --device auto --out "$out/bench_$group" )
    [ $? -eq 124 ] && echo "benchmarks: $group stopped at its time budget (see log.txt)"
  else
    echo "benchmarks: $group skipped, only ${l}s left"
  fi
done
rm -f "$out"/bench_*/scaling.png
echo "gpu_check: done in $(( $(date +%s) - start ))s; files: $(ls "$out" | tr '\n' ' ')"
exit $rc
