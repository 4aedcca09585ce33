"""How a Linear's per-row noise factor is drawn: QR of Xᵀ (the old route), batched Cholesky of
the T × T Gram XXᵀ (the route taken), and the direct X·Ξ product with Ξ a d_in × d_out draw per
row, against the plain batched matmul X·Wᵀ of the same shapes (issue 29 item 1).

All three give the exact law of the noise term X·Eᵀ of one row, E ∼ N(0, σ²I): its columns are
N(0, σ²XXᵀ). Each is timed on MiniLM-shaped (T = 32, widths 384 / 1536) and BERT-base-shaped
(T = 128, widths 768 / 3072) inputs; ratios are against the plain matmul timed interleaved in
the same run, process CPU time, one thread (benchmarks/README.md).

    python benchmarks/bench_row_noise.py [--repeats 5] [--out benchmarks/results/row_noise]

``--census``: instead of timing, the operator census of issue 40 (items 3 and 4) on a
BERT-shaped and a ViT-shaped tiny model, on the CPU: host synchronisations of one Monte Carlo
pass, one data pass and one Hessian trace at 1 and at 4 batches, and the aten operators and
FLOPs of one per-sample forward against a plain forward of the same batch, in the same run
(``census_cpu.json`` / ``.md``; ``--label`` names the record, e.g. before / after;
``--device cuda`` on a card, ``census_cuda.*``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from common import interleaved  # noqa: E402

SHAPES = {  # name: (rows R, tokens T, d_in, d_out)
    "minilm_qkv": (32, 32, 384, 384),
    "minilm_ffn_in": (32, 32, 384, 1536),
    "minilm_ffn_out": (32, 32, 1536, 384),
    "bert_qkv": (8, 128, 768, 768),
    "bert_ffn_in": (8, 128, 768, 3072),
    "bert_ffn_out": (8, 128, 3072, 768),
}


def routes(R: int, T: int, d_in: int, d_out: int, g: torch.Generator) -> dict:
    X = torch.randn(R, T, d_in, generator=g)
    W = torch.randn(d_out, d_in, generator=g) / d_in ** 0.5
    y = X @ W.T

    def plain():
        return X @ W.T

    def qr():
        r = torch.linalg.qr(X.transpose(1, 2), mode="r").R
        return torch.baddbmm(y, r.transpose(1, 2), torch.randn(R, T, d_out, generator=g))

    def cholesky():
        L, info = torch.linalg.cholesky_ex(torch.bmm(X, X.transpose(1, 2)))
        return torch.baddbmm(y, L, torch.randn(R, T, d_out, generator=g))

    def direct():
        return torch.baddbmm(y, X, torch.randn(R, d_in, d_out, generator=g))

    return {"plain": plain, "qr": qr, "cholesky": cholesky, "direct": direct}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="benchmarks/results/row_noise")
    ap.add_argument("--census", action="store_true", help="the operator census, not timings")
    ap.add_argument("--label", default="current", help="name of the census record")
    ap.add_argument("--device", default="cpu", help="census device (cuda: also counts the "
                    "synchronisations CUDA's debug mode reports)")
    a = ap.parse_args()
    if a.census:
        from census_row_noise import write_census

        write_census(Path(a.out), a.label, a.device)
        return
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    rows = {}
    load = [os.getloadavg()[0]]
    for name, shape in SHAPES.items():
        t, _ = interleaved(routes(*shape, g), a.repeats)
        base = t["plain"].best
        rows[name] = {"shape_R_T_din_dout": shape,
                      **{k: {"cpu_min_s": v.best, "ratio_to_plain": v.best / base}
                         for k, v in t.items()}}
        print(name, shape, "  ".join(f"{k} {v.best / base:.2f}x" for k, v in t.items()),
              flush=True)
    load.append(os.getloadavg()[0])
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"metric": "process CPU time, minimum over repeats, 1 torch thread; ratio = route / "
                     "plain X·Wᵀ of the same shapes (the noise term's cost alone, excluding "
                     "the plain matmul it is added to)",
           "torch": torch.__version__, "load_1min_before_after": load, "repeats": a.repeats,
           "results": rows}
    (out / "routes_cpu.json").write_text(json.dumps(doc, indent=1))
    lines = ["| shape (R, T, d_in, d_out) | QR | Cholesky | direct X·Ξ |", "|---|---|---|---|"]
    for name, r in rows.items():
        lines.append(f"| {name} {tuple(r['shape_R_T_din_dout'])} | "
                     + " | ".join(f"{r[k]['ratio_to_plain']:.2f}×"
                                  for k in ("qr", "cholesky", "direct")) + " |")
    (out / "routes_cpu.md").write_text(
        "Noise-term cost per Linear as a multiple of the plain matmul (CPU, 1 thread, load "
        f"{load[0]:.2f} → {load[1]:.2f}).\n\n" + "\n".join(lines) + "\n")
    print(f"wrote {out}/routes_cpu.json")


if __name__ == "__main__":
    main()
