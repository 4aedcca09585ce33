"""``boundcalc measure``: measure a checkpoint and write the stats file."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from ..measure.compress.options import CompressOptions
from ..measure.data.options import MeasureOptions
from .app import app, console, emit_json, err_console, guarded
from .progress import Stages, check_device, require_paths
from .record_options import takes


# options that do nothing without another one: refused when given alone
NEEDS = {"--compress": ("max_changed", "quantizer", "levels_grid", "codebook_bits", "prefix"),
         "--tune-data or --sigma-groups": ("tune_draws", "group_draws", "tune_slack",
                                           "tune_shape"),
         "--tune-data": ("allow_overlap", "search_rows"),
         "--data": ("init_data",)}


def _unused_options(ctx: typer.Context, given: dict[str, bool]) -> str | None:
    """The first option the user gave whose prerequisite (a key of :data:`NEEDS`) is absent."""
    for need, names in NEEDS.items():
        if given[need]:
            continue
        for name in names:
            # by name: typer may vendor its own click, with its own enum
            source = getattr(ctx.get_parameter_source(name), "name", None)
            if source in ("COMMANDLINE", "ENVIRONMENT"):
                flag = next(o for p in ctx.command.params if p.name == name
                            for o in p.opts if o.startswith("--"))
                return f"{flag} does nothing without {need}; add {need} or leave {flag} out"
    return None


def _warn(line: str) -> None:
    """A compression's warning (its bounds are not about the trained model), at once."""
    err_console.print(f"warning: {escape(line)}", highlight=False)


def _same_checkpoint(model: str, init: str | None) -> bool:
    """Whether ``init`` names the model's own files (same folder or file, links included)."""
    import os

    try:
        return init is not None and os.path.exists(init) and os.path.samefile(model, init)
    except OSError:
        return False


@app.command("measure")
@takes((MeasureOptions, [f.name for f in fields(MeasureOptions) if f.name != "head_init"]),
       (CompressOptions, [f.name for f in fields(CompressOptions)], "select"))
def measure_cmd(
    ctx: typer.Context,
    model: str = typer.Argument(..., help="HF folder, .safetensors file, sharded index json or "
                                          "torch state_dict; with --data a HF folder whose "
                                          "config names a task head"),
    init: Optional[str] = typer.Option(None, "--init", help="the PAC-Bayes prior centre and "
                                       "distance reference: the checkpoint the model was "
                                       "fine-tuned from (names matched across bert./roberta./"
                                       "model./… prefixes), 'random:SEED' (the model's own "
                                       "initialisation, re-drawn) or 'zero'"),
    head_init: str = typer.Option(
        "zero", "--head-init",
        help="centre of model tensors the --init checkpoint lacks (a new task head): 'zero' or "
             "'random:SEED'"),
    data: Optional[str] = typer.Option(None, "--data", help="CSV, JSON Lines, Parquet, a "
                                       "datasets.save_to_disk folder, or .pt/.npz/.safetensors "
                                       "tensors; the sample the bounds are about"),
    prior_data_dependent: bool = typer.Option(False, "--prior-data-dependent", help="say that "
                                              "--init was fit on DATA itself (refused)"),
    n_heads: Optional[int] = typer.Option(None, "--n-heads", min=1,
                                          help="attention heads, when no config.json says so"),
    output: Path = typer.Option(Path("stats.json"), "-o", "--output", help="stats file to write"),
    as_json: bool = typer.Option(False, "--json", help="print a JSON summary instead of tables"),
    show_map: bool = typer.Option(False, "--show-map", help="print every layer-map entry"),
    values: dict = None,  # the records' fields, from their declarations (takes; the
    # CompressOptions record only with --compress)
) -> None:
    """Measure per-matrix, per-head and data statistics of a checkpoint into a stats file.

    With --data and a task-head folder: 0-1 risk, cross-entropy, margins, B_X, T, Monte Carlo
    Gibbs risk at each --sigma, Hessian trace, so that `boundcalc compare --stats` prints
    certified numbers.

    Where the minutes go with --data: one pass over DATA, then --draws passes per σ for the
    Gibbs risk and --hessian-probes Hessian-vector products. Left at their defaults, σ and the
    draws are sized to a time target from a one-batch calibration (with --tune-data: one σ
    chosen there, measured once on DATA); the plan is printed before the first pass.
    """

    def run() -> None:
        from ..errors import BoundcalcError

        o = MeasureOptions(head_init=head_init, **values[MeasureOptions])  # every value checked
        given = values[CompressOptions]
        unused = _unused_options(ctx, {"--compress": given is not None,
                                       "--tune-data or --sigma-groups":
                                           o.tune_data is not None or o.sigma_groups,
                                       "--tune-data": o.tune_data is not None,
                                       "--data": data is not None})
        if unused:
            raise BoundcalcError(unused)
        if prior_data_dependent:
            raise BoundcalcError("--prior-data-dependent: a PAC-Bayes prior fit on the same data "
                                 "as the bound is not a valid prior; fit --init on a disjoint "
                                 "split (or use the pretrained / initial weights)")
        compress = None
        if given is not None:  # option checks: cheapest first
            from ..measure.compress.options import require_data

            require_data(data)
            compress = CompressOptions(**given)
        from ..prior_spec import is_keyword, parse_centre, parse_head_init

        parse_head_init(head_init)
        if init is not None:
            parse_centre(init)
        require_paths(model=model, init=None if is_keyword(init) else init,
                      tune_data=o.tune_data, init_data=o.init_data)  # before torch and the model
        if _same_checkpoint(model, init):
            import warnings

            warnings.warn(f"--init {init} is the model itself: ‖w − w_prior‖ = 0 and the KL "
                          "term is 0, which is honest only if these weights never saw DATA "
                          "(a pretrained model measured on fresh data); a fine-tuned model "
                          "needs the checkpoint it was fine-tuned from", stacklevel=1)
        check_device(o.device)  # before transformers and the model: a missing CUDA at once
        stages = Stages("measure")
        from ..measure import measure
        from ..measure.data.dataset_io import TABLE_SUFFIXES
        from ..measure.data.hf import load_task_model, read_config, task_of

        progress = stages.measure_progress(model)
        cfg = read_config(model) if data is not None else None
        is_table = data is not None and (Path(data).is_dir() or
                                         Path(data).suffix.lower() in TABLE_SUFFIXES)
        task = data is not None and (is_table or task_of(cfg) is not None)
        if task:
            from ..measure.data.task_measure import measure_task

            picked = []
            if compress is not None:  # on the model and the batches measure_task loads
                from ..measure.compress.compression import CompressionStage

                picked.append(CompressionStage(compress, data, init, head_init, warn=_warn))
            stats = measure_task(model, data, init, o, progress=progress, say=stages.note,
                                 stages=picked)
        else:
            if o.precision is not None:
                raise BoundcalcError("--precision sets the data side's arithmetic: it needs "
                                     "--data and a Hugging Face folder with a task head")
            if o.tune_data is not None or o.sigma_groups:
                raise BoundcalcError("--tune-data / --sigma-groups need --data and a Hugging "
                                     "Face folder with a task head")
            stats = measure(model, init=init, data=data, device=o.device, n_heads=n_heads,
                            progress=progress, head_init=head_init)
            if compress is not None:  # a code length needs a task head: refused by its loader
                load_task_model(model)
        path = stats.save(output)
        stages.done()
        from ..report.measure_view import measure_summary, print_data, print_weights

        if as_json:
            emit_json(measure_summary(stats, path, data_side=task))
        elif task:
            print_data(stats, path, console, sigma_given="sigmas" in values[MeasureOptions])
        else:
            print_weights(stats, path, console, show_map)

    guarded(run)
