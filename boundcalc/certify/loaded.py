"""What one ``certify`` run has loaded, shared by the steps that measure (issue 53 item 4).

:class:`Loaded` holds, for one run's output folder, each model folder (``model/``, ``prior/``)
loaded once (:func:`boundcalc.measure.data.hf.load_task_model`, on the run's device) and each
split (``S.jsonl``, ``test.jsonl``) read once (its columns, by the data side's reader
:func:`~boundcalc.measure.data.dataset_io.read_columns`), from which both its texts and labels
(the error counts) and its batches (the Gibbs and bound-posterior passes) are made. The
measure step, the bound-trained posterior, the held-out evidence and the disagreement route
all take what they need from it, so ``certify --posterior bound --test-data`` loads ``model/``
once and reads ``test.jsonl`` once.

A step that rewrites a folder invalidates what was loaded from it (:meth:`Loaded.forget`,
called by :class:`~.steps.Chain` with the step's outputs). Whoever changes a loaded model's
weights works on a copy (:meth:`Loaded.copy`): the bound-trained posterior trains μ on one.
The posterior step trains its own copy of ``prior/``, loaded for training
(:func:`~.train.load_trained`), not from here: its numbers are those of that loader.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable


class Loaded:
    """One run's loaded folders and rows (module docstring); ``out``: the run's folder,
    ``device``: where models go."""

    def __init__(self, out: Path, device: Any) -> None:
        self.out, self.device = Path(out), device
        self._models: dict[Path, Any] = {}
        self._columns: dict[Path, tuple[Any, str, str]] = {}
        self._batches: dict[tuple[Path, int, int | None], Any] = {}

    def _path(self, name: str | Path) -> Path:
        return (self.out / name).resolve()

    def model(self, name: str | Path) -> Any:
        """The :class:`~boundcalc.measure.data.hf.TaskModel` of folder ``name`` of ``out``,
        loaded on the first call (:meth:`load`)."""
        return self.load(self.out / name)

    def load(self, path: str | Path, device: Any = None) -> Any:
        """The task model of folder ``path`` (as given: relative to the working directory),
        loaded on the first call; the loader ``measure_task`` takes (``device`` is the run's,
        already)."""
        from ..measure.data.hf import load_task_model

        key = Path(path).resolve()
        if key not in self._models:
            self._models[key] = load_task_model(key, self.device)
        return self._models[key]

    def copy(self, name: str | Path) -> Any:
        """:meth:`model` with a deep copy of its weights (for a step that changes them) and
        its tokenizer shared (:meth:`tokenizer`)."""
        tm = self.model(name)
        tokenizer = self.tokenizer(name)
        return replace(tm, model=copy.deepcopy(tm.model), tokenizer=tokenizer)

    def tokenizer(self, name: str | Path) -> Any:
        """The tokenizer of folder ``name`` (kept on its task model)."""
        from ..measure.data.hf import load_tokenizer

        tm = self.model(name)
        if tm.tokenizer is None:
            tm.tokenizer = load_tokenizer(self._path(name))
        return tm.tokenizer

    def _read(self, name: str) -> tuple[Any, str, str]:
        from ..measure.data.dataset_io import read_columns

        key = self._path(name)
        if key not in self._columns:  # read by the name as given: the rows' source says it
            self._columns[key] = read_columns(self.out / name, {"text", "label"})
        return self._columns[key]

    def rows(self, name: str) -> tuple[list[str], list[int]]:
        """Texts and class indices of split ``name`` (a file :func:`.split.write_jsonl`
        wrote)."""
        cols = self._read(name)[0]
        return [str(t) for t in cols["text"]], [int(y) for y in cols["label"]]

    def batches(self, name: str, *, max_length: int, batch_size: int | None,
                model: str = "model") -> Any:
        """Split ``name`` in batches for folder ``model``'s task model, sized as
        :func:`~boundcalc.measure.data.batch_rows.read_sized` sizes them (from the one read)."""
        from ..measure.data.batch_rows import read_sized

        key = (self._path(name), max_length, batch_size)
        if key not in self._batches:
            self._batches[key] = read_sized(self.out / name, self.model(model), self.device,
                                            max_length=max_length, given=batch_size,
                                            columns=self._read(name))
        return self._batches[key]

    def forget(self, paths: Iterable[str | Path]) -> None:
        """Drop what was loaded from ``paths`` (a step rewrote them)."""
        gone = {self._path(p) for p in paths}
        for store in (self._models, self._columns):
            for key in [k for k in store if k in gone]:
                del store[key]
        for key in [k for k in self._batches if k[0] in gone]:
            del self._batches[key]
