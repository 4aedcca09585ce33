"""A small zoo of real (randomly initialised) BERT checkpoints and its sweep manifest."""

from __future__ import annotations

import csv
from pathlib import Path

import torch

from _measure_helpers import save_safetensors


def tiny_bert_w(width: int, seed: int):
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    cfg = BertConfig(hidden_size=width, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=2 * width, vocab_size=50, max_position_embeddings=16)
    return BertModel(cfg).eval()


def make_zoo(folder: Path, widths=(32, 48), seeds=range(6), broken: bool = True) -> Path:
    """``len(widths) * len(seeds)`` checkpoints (each with its width's init), plus one broken
    file when ``broken``; returns the manifest (CSV, relative paths)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for w in widths:
        save_safetensors(tiny_bert_w(w, 1000 + w), folder / f"init_w{w}")
        for s in seeds:
            save_safetensors(tiny_bert_w(w, s), folder / f"w{w}_s{s}")
            rows.append({"path": f"w{w}_s{s}", "init": f"init_w{w}", "set:n": 1000 * (1 + s),
                         "set:emp_risk": 0.05, "set:sigma": 0.01, "hp:width": w, "hp:seed": s,
                         "test_error": round(0.2 + 0.01 * s - 0.001 * w, 6)})
    if broken:
        (folder / "broken.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00not json")
        rows.append({"path": "broken.safetensors", "init": "", "set:n": 1000,
                     "set:emp_risk": 0.05, "set:sigma": 0.01, "hp:width": 0, "hp:seed": 99,
                     "test_error": 0.5})
    manifest = folder / "manifest.csv"
    with open(manifest, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return manifest
