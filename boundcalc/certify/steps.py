"""The contract of one step of ``certify`` and the chain that runs them (in the manner of
CVXPY's ``reductions/chain.py``: each step a class, composed by one short chain).

A :class:`Step` states

* ``name``: its name in the run folder's manifest (:mod:`.run_folder`);
* ``settings``: the sub-record of :class:`~.config.CertifyConfig` it reads (a
  :class:`~.config.StepSettings`; the device, which changes where a step runs and not what it
  is asked, is the context's, in no key);
* :meth:`Step.outputs`: the names it writes in the output folder;
* :meth:`Step.inputs`: what else its outputs depend on besides its settings and the earlier
  steps (the data's hash, the base model's fingerprint, the rule it follows);
* :meth:`Step.key`: SHA-256 (16 hex digits) of its name, its sub-record, the key of the step
  before it and its inputs, so a change re-runs it and every later step;
* :meth:`Step.run` (``context → outputs``): writes its files and returns what later steps
  read; :meth:`Step.reuse`: the same values read back from the files, when they are reused.

:class:`Chain` runs the steps in order: each is reused only when the run folder finds it
recorded with its key and its files as written (:meth:`.run_folder.RunFolder.fresh`), else it
runs and is recorded (:meth:`~.run_folder.RunFolder.finish`), and what was loaded from the
folders it wrote is dropped from :attr:`Context.loaded`. What the steps return is gathered in
:attr:`Context.found`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from .config import CertifyConfig, StepSettings
from .run_folder import RunFolder


@dataclass
class Context:
    """One certify run as the steps see it: the inputs, the settings, where it writes, the
    device and the callbacks; the base's folder, whether it holds weights (``pretrained``) and
    the learning rates and prior epochs filled in for its kind (``rates``); ``rule``: the
    plan rule's record of the counts it filled (:mod:`.plan_rule`); ``found`` gathers
    what each step returned, ``keys`` each step's key; ``loaded``: the models and rows the
    steps share (:class:`~.loaded.Loaded`, made for ``out`` and ``device`` when not given)."""

    base: str | Path
    data: str | Path
    test_data: str | Path | None
    out: Path
    cfg: CertifyConfig
    device: Any
    say: Callable[[str], None]
    progress: Any = None
    train_fn: Callable[..., Any] | None = None
    custom: bool = False
    base_dir: Path | None = None
    pretrained: bool = False
    rates: tuple[float, float, int] = (0.0, 0.0, 0)
    found: dict[str, Any] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    loaded: Any = None  # the run's models and rows, loaded once (.loaded.Loaded)
    rule: dict[str, Any] | None = None  # the plan rule's choice (plan_rule.record)

    def __post_init__(self) -> None:
        if self.loaded is None:
            from .loaded import Loaded

            self.loaded = Loaded(self.out, self.device)

    def settings(self, kind: type[StepSettings]) -> Any:
        """The sub-record ``kind`` of this run's settings."""
        return kind.of(self.cfg)


class Step:
    """One step of certify (module docstring); subclasses set ``name`` and ``settings`` and
    define :meth:`outputs` and :meth:`run`."""

    name: str = ""
    settings: type[StepSettings] = StepSettings

    def outputs(self, ctx: Context) -> Sequence[str]:
        """The names this step writes in ``ctx.out`` (each hashed into the manifest)."""
        raise NotImplementedError

    def inputs(self, ctx: Context) -> Any:
        """What the outputs depend on besides the settings and the earlier steps (JSON-able)."""
        return None

    def key(self, ctx: Context, upstream: str) -> str:
        """SHA-256 (16 hex digits) of the name, the sub-record, ``upstream`` (the key of the
        step before) and :meth:`inputs`."""
        mine = asdict(ctx.settings(self.settings))
        blob = json.dumps([self.name, mine, upstream, self.inputs(ctx)], sort_keys=True,
                          default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def run(self, ctx: Context) -> dict[str, Any]:
        """Write the outputs; return what later steps read (merged into ``ctx.found``)."""
        raise NotImplementedError

    def reuse(self, ctx: Context) -> dict[str, Any]:
        """The values :meth:`run` returns, read back from outputs that are reused."""
        return {}


class Chain:
    """Steps run in order into one run folder (module docstring)."""

    def __init__(self, steps: Sequence[Step]):
        self.steps = tuple(steps)

    @property
    def names(self) -> tuple[str, ...]:
        """The steps' names, in order (the run folder's order)."""
        return tuple(s.name for s in self.steps)

    def run(self, ctx: Context, folder: RunFolder) -> None:
        """Run or reuse each step; ``ctx.keys`` and ``ctx.found`` collect keys and values."""
        upstream = ""
        for step in self.steps:
            key = upstream = ctx.keys[step.name] = step.key(ctx, upstream)
            if folder.fresh(step.name, key, [ctx.out / n for n in step.outputs(ctx)]):
                ctx.found.update(step.reuse(ctx))
            else:
                ctx.found.update(step.run(ctx))
                ctx.loaded.forget(step.outputs(ctx))  # what it rewrote is read afresh
                folder.finish(step.name, key)
