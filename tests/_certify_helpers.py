"""A labelled text task nobody can get wrong by accident, and small bases for ``certify``."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

TOPICS = {
    "sport": "match goal team player coach league score stadium referee season".split(),
    "food": "recipe oven flour butter sauce garlic dinner kitchen bake spices".split(),
    "space": "planet orbit rocket galaxy comet telescope astronaut lunar star launch".split(),
}
FILLER = ("the a of and to in is was it for on with as at by this that from have new "
          "very more some about after today we they").split()


def synthetic_rows(n: int, seed: int = 0, classes: tuple[str, ...] = ("sport", "food"),
                   noise: float = 0.0) -> list[tuple[str, str]]:
    """``n`` (text, label) rows: 6–10 filler words with 2 words of the label's topic mixed in;
    the label is the topic's name (a string), so the task is separable by vocabulary. With
    ``noise``, that fraction of the labels (in expectation) is replaced by a uniformly drawn
    class (so the best error is about noise·(1 − 1/K))."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        label = classes[int(rng.integers(len(classes)))]
        words = list(rng.choice(FILLER, int(rng.integers(6, 11))))
        for w in rng.choice(TOPICS[label], 2, replace=False):
            words.insert(int(rng.integers(len(words) + 1)), str(w))
        if noise and rng.random() < noise:
            label = classes[int(rng.integers(len(classes)))]
        rows.append((" ".join(words), label))
    return rows


def write_csv(path: Path, rows: list[tuple[str, str]], text: str = "text",
              label: str = "label") -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow([text, label])
        w.writerows(rows)
    return path


def bert_config_folder(out: Path, hidden: int = 64, layers: int = 2, heads: int = 2,
                       tokenizer: str | Path | None = None) -> Path:
    """A folder with a BERT config (no weights) and a tokenizer (default: the bundled
    MiniLM's)."""
    from transformers import AutoTokenizer, BertConfig

    if tokenizer is None:
        from tests._measure_helpers import minilm_path

        tokenizer = minilm_path()
    tok = AutoTokenizer.from_pretrained(tokenizer)
    BertConfig(vocab_size=tok.vocab_size, hidden_size=hidden, num_hidden_layers=layers,
               num_attention_heads=heads, intermediate_size=2 * hidden,
               max_position_embeddings=128).save_pretrained(out)
    tok.save_pretrained(out)
    return out


# the small settings of the certify route tests (a 1-layer BERT config on 240 synthetic rows)
SMALL_CERTIFY = dict(prior_epochs=6, prior_lr=3e-3, post_lr=1e-3, batch_size=16, max_length=24,
                     sigmas=(0.01,), draws=1, tune_rows=48, tune_draws=1, group_draws=2,
                     tune_shape="per-group")


def small_certify_run(w: Path, config) -> dict:
    """``certify`` of a 1-layer BERT config (hidden 32) on 240 synthetic rows with 100 held
    out, into ``w/out``: ``{"w", "base", "res"}``."""
    from boundcalc.certify import certify

    base = bert_config_folder(w / "base", hidden=32, layers=1, heads=2)
    write_csv(w / "d.csv", synthetic_rows(240, 0))
    write_csv(w / "t.csv", synthetic_rows(100, 1))
    return {"w": w, "base": base, "res": certify(base, w / "d.csv", w / "out", w / "t.csv",
                                                 config)}
