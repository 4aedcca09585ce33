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
