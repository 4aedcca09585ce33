"""``boundcalc measure``: measure a checkpoint and write the stats file."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from .app import app, console, emit_json, err_console, guarded
from .progress import Stages, check_device, require_paths


# options that do nothing without another one: refused when given alone
NEEDS = {"--compress": ("max_changed", "quantizer", "levels", "codebook_bits", "prefix"),
         "--tune-data or --sigma-groups": ("tune_draws", "group_draws", "tune_slack"),
         "--tune-data": ("allow_overlap",),
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


def _same_checkpoint(model: str, init: str | None) -> bool:
    """Whether ``init`` names the model's own files (same folder or file, links included)."""
    import os

    try:
        return init is not None and os.path.exists(init) and os.path.samefile(model, init)
    except OSError:
        return False


@app.command("measure")
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
    text_column: str = typer.Option("text", "--text-column", help="text column of DATA"),
    label_column: str = typer.Option("label", "--label-column", help="label column of DATA"),
    max_length: int = typer.Option(128, "--max-length", min=2, help="tokens per text (truncate)"),
    batch_size: Optional[int] = typer.Option(
        None, "--batch-size", min=1,
        help="samples per batch (default: 32 on a CPU, sized to the card's memory on CUDA)"),
    sigma: Optional[list[float]] = typer.Option(None, "--sigma", help="posterior σ for the "
                                                "Monte Carlo Gibbs risk (repeatable; snapped to "
                                                "the Dziugaite–Roy grid); default: with "
                                                "--tune-data one σ chosen there (free), "
                                                "else up to seven σ, 0.001 … 0.1, as many "
                                                "as fit the time target here"),
    draws: Optional[int] = typer.Option(None, "--draws", min=0, help="Monte Carlo passes per σ "
                                        "(0: skip): posterior draws in whole mode, passes with "
                                        "a fresh draw per sample in sample mode (default: up "
                                        "to 20, as many as fit the time target here)"),
    gibbs_mode: str = typer.Option("auto", "--gibbs-mode", help="auto | sample | whole: a fresh "
                                   "posterior draw per sample (N = draws·n losses in the kl "
                                   "term; auto where exact) or one draw per pass (N = draws)"),
    precision: Optional[str] = typer.Option(None, "--precision", help="fp32 | tf32 | bf16: the "
                                            "arithmetic of the data pass and the Monte Carlo "
                                            "passes (default fp32 on a CPU, tf32 on CUDA; "
                                            "recorded in the stats file)"),
    gibbs_samples: Optional[int] = typer.Option(None, "--gibbs-samples", min=1, help="evaluate "
                                                "each pass on m samples drawn uniformly with "
                                                "replacement from DATA"),
    delta_mc: float = typer.Option(0.01, "--delta-mc", help="confidence δ′ of the Monte Carlo "
                                   "step, split over the σ points"),
    hessian_probes: Optional[int] = typer.Option(None, "--hessian-probes", min=0, help="Hutchinson "
                                                 "probes, each a Hessian-vector product on "
                                                 "--hessian-samples samples (0: skip the "
                                                 "Hessian trace; default: up to 20, as many as "
                                                 "fit the time target here)"),
    hessian_samples: int = typer.Option(256, "--hessian-samples", min=1, help="samples in the "
                                        "loss whose Hessian trace is estimated"),
    perturbation_draws: int = typer.Option(0, "--perturbation-draws", min=0, help="noise draws "
                                           "per σ of the Lintilhac–Shaikh mesh for P̂ (0: skip; "
                                           "20 × draws Hutchinson estimates)"),
    tune_data: Optional[str] = typer.Option(None, "--tune-data", help="a split disjoint from "
                                            "DATA (e.g. the one --init was trained on): search "
                                            "per-group σ_g there with the --init weights, at no "
                                            "union-bound cost; then the Gibbs risk on DATA once"),
    sigma_groups: bool = typer.Option(False, "--sigma-groups", help="per-group σ_g (implied by "
                                      "--tune-data); without --tune-data searched on DATA and "
                                      "charged per group"),
    tune_draws: Optional[int] = typer.Option(None, "--tune-draws", min=1, help="Monte Carlo "
                                             "draws per σ vector tried by the search (default: "
                                             "up to 4, as many as fit the time target here)"),
    group_draws: Optional[int] = typer.Option(None, "--group-draws", min=1, help="Monte Carlo "
                                              "passes over DATA at the chosen per-group σ "
                                              "vector, drawn as --gibbs-mode says (default: "
                                              "--draws)"),
    tune_slack: float = typer.Option(0.05, "--tune-slack", help="the search keeps the "
                                     "searched weights' Gibbs risk ≤ their error + this"),
    smoothing: float = typer.Option(0.01, "--smoothing", help="α of prediction smoothing for "
                                    "language models (bounded per-token loss)"),
    prior_data_dependent: bool = typer.Option(False, "--prior-data-dependent", help="say that "
                                              "--init was fit on DATA itself (refused)"),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda"),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="torch threads for "
                                          "the data side with --data (default: one for a "
                                          "model no wider than 512 on a CPU, where a thread "
                                          "pool costs more than it gives, else torch's "
                                          "default); sums may differ in the last bits with it"),
    n_heads: Optional[int] = typer.Option(None, "--n-heads", min=1,
                                          help="attention heads, when no config.json says so"),
    output: Path = typer.Option(Path("stats.json"), "-o", "--output", help="stats file to write"),
    as_json: bool = typer.Option(False, "--json", help="print a JSON summary instead of tables"),
    show_map: bool = typer.Option(False, "--show-map", help="print every layer-map entry"),
    compress: Optional[str] = typer.Option(
        None, "--compress", help="code length for compression bounds: 'all' weights, the "
        "'delta' from --init, or 'auto' (delta with --init, else all), quantized; needs --data "
        "and an HF folder with a task head"),
    quantizer: str = typer.Option("uniform", "--quantizer", help="uniform | kmeans levels"),
    levels: Optional[str] = typer.Option(None, "--levels", help="level counts to try; the "
                                         "choice costs log2(count) bits inside the code "
                                         "(default: 1,16 for a delta from --init, which a "
                                         "fine-tuned model can use; 2,4,8,16,32,64 for all "
                                         "weights)"),
    codebook_bits: int = typer.Option(16, "--codebook-bits", help="bits per codebook level "
                                      "(16 or 32)"),
    prefix: str = typer.Option("none", "--prefix", help="none | authors (add 2·log2 L bits)"),
    max_changed: Optional[float] = typer.Option(None, "--max-changed", help="refuse a quantizer "
                                                "changing more than this fraction of predictions"),
    allow_overlap: bool = typer.Option(False, "--allow-overlap", help="accept --tune-data rows "
                                       "that are rows of DATA (compared by content: inputs and "
                                       "label); the σ shape is then charged as if chosen on "
                                       "DATA, and the shared rows are counted in the stats file"),
    init_data: Optional[str] = typer.Option(None, "--init-data", help="the data --init was "
                                            "trained on: refused if it shares a row (inputs "
                                            "and label) with DATA"),
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

        unused = _unused_options(ctx, {"--compress": compress is not None,
                                       "--tune-data or --sigma-groups":
                                           tune_data is not None or sigma_groups,
                                       "--tune-data": tune_data is not None,
                                       "--data": data is not None})
        if unused:
            raise BoundcalcError(unused)
        if prior_data_dependent:
            raise BoundcalcError("--prior-data-dependent: a PAC-Bayes prior fit on the same data "
                                 "as the bound is not a valid prior; fit --init on a disjoint "
                                 "split (or use the pretrained / initial weights)")
        if compress is not None:  # option checks: cheapest first
            from ..measure.compress.compression import add_compression
            from ..measure.compress.options import compression_options

            opts = compression_options(compress, quantizer, levels, codebook_bits, prefix,
                                       max_changed, data, init=init)
        from ..prior_spec import is_keyword, parse_centre, parse_head_init

        parse_head_init(head_init)
        if init is not None:
            parse_centre(init)
        require_paths(model=model, init=None if is_keyword(init) else init,
                      tune_data=tune_data, init_data=init_data)  # before torch and the model are loaded
        if _same_checkpoint(model, init):
            import warnings

            warnings.warn(f"--init {init} is the model itself: ‖w − w_prior‖ = 0 and the KL "
                          "term is 0, which is honest only if these weights never saw DATA "
                          "(a pretrained model measured on fresh data); a fine-tuned model "
                          "needs the checkpoint it was fine-tuned from", stacklevel=1)
        check_device(device)  # before transformers and the model: a missing CUDA at once
        stages = Stages("measure")
        from ..measure import measure
        from ..measure.data.dataset_io import TABLE_SUFFIXES
        from ..measure.data.hf import read_config, task_of

        progress = stages.measure_progress(model)
        cfg = read_config(model) if data is not None else None
        is_table = data is not None and (Path(data).is_dir() or
                                         Path(data).suffix.lower() in TABLE_SUFFIXES)
        task = data is not None and (is_table or task_of(cfg) is not None)
        if task:
            from ..measure.data.options import MeasureOptions
            from ..measure.data.task_measure import measure_task

            options = MeasureOptions(
                device=device, text_column=text_column, label_column=label_column,
                max_length=max_length, batch_size=batch_size, head_init=head_init,
                sigmas=tuple(sigma) if sigma else None, draws=draws, delta_mc=delta_mc,
                gibbs_mode=gibbs_mode, gibbs_samples=gibbs_samples, smoothing=smoothing,
                hessian_probes=hessian_probes, hessian_samples=hessian_samples,
                perturbation_draws=perturbation_draws, sigma_groups=sigma_groups,
                tune_data=tune_data, tune_draws=tune_draws, tune_slack=tune_slack,
                group_draws=group_draws, allow_overlap=allow_overlap, init_data=init_data,
                threads=threads, precision=precision)
            stats = measure_task(model, data, init, options, progress=progress,
                                 say=stages.note)
        else:
            if precision is not None:
                raise BoundcalcError("--precision sets the data side's arithmetic: it needs "
                                     "--data and a Hugging Face folder with a task head")
            if tune_data is not None or sigma_groups:
                raise BoundcalcError("--tune-data / --sigma-groups need --data and a Hugging "
                                     "Face folder with a task head")
            stats = measure(model, init=init, data=data, device=device, n_heads=n_heads,
                            progress=progress, head_init=head_init)
        if compress is not None:
            result = add_compression(stats, model, data, init, text_column=text_column,
                                     label_column=label_column, max_length=max_length,
                                     batch_size=batch_size or 32, head_init=head_init, **opts)
            if result.warning():
                err_console.print(f"warning: {escape(result.warning())}", highlight=False)
        path = stats.save(output)
        stages.done()
        from ..report.measure_view import measure_summary, print_data, print_weights

        if as_json:
            emit_json(measure_summary(stats, path, data_side=task))
        elif task:
            print_data(stats, path, console, sigma_given=bool(sigma))
        else:
            print_weights(stats, path, console, show_map)

    guarded(run)
