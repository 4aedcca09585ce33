"""The language-model example's card presets planned by counted FLOPs (issue 51): for the
default, ``--full`` and ``--gpt2`` presets, the FLOPs of each stage (``studies.lm_flops``,
counted on a CPU with ``torch.utils.flop_counter``) and the seconds they take at the assumed
fraction of an H200's dense bf16 peak (989 TFLOP/s). Targets: ``--full`` ≤ 10 min,
``--gpt2`` inside a 15-minute lease. Writes ``benchmarks/results/lm_presets_plan.json``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from studies.language_model import FULL, GPT2, LMConfig  # noqa: E402
from studies.lm_flops import plan  # noqa: E402


def main() -> None:
    out = {name: {**plan(LMConfig(**preset)), "target_seconds": target}
           for name, preset, target in (("default", {}, None), ("--full", FULL, 600),
                                        ("--gpt2", GPT2, 900))}
    (HERE / "results" / "lm_presets_plan.json").write_text(json.dumps(out, indent=1) + "\n")
    for name, p in out.items():
        print(f"{name:8s} {p['n_params'] / 1e6:6.1f} M weights  {p['total_flops'] / 1e15:7.2f} "
              f"PFLOP  {p['total_seconds']:7.1f} s at {p['assumed_fraction_of_peak']:.0%} of "
              f"the H200's bf16 peak (target {p['target_seconds']} s)")


if __name__ == "__main__":
    main()
