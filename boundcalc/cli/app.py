"""The Typer application and the error guard shared by every command module."""

from __future__ import annotations

import inspect
import json
import sys
import warnings
from typing import Any, Callable, Optional

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from ..errors import BoundcalcError, one_line, shown

try:  # typer ≥ 0.2x vendors click; older versions use click itself
    from typer._click import exceptions as _cx
except ImportError:  # pragma: no cover
    from click import exceptions as _cx


class OneLineErrors(TyperGroup):
    """The command group, with usage errors (unknown option, missing argument, bad value) as one
    line on stderr and click's exit code 2, instead of click's multi-line box."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True,
             **extra):  # type: ignore[override]
        from ..files.atomic_write import run_scope
        from ..words import use_words
        from .words import CLI_WORDS

        tidy_help(self)
        argv = list(sys.argv[1:] if args is None else args)
        with warnings.catch_warnings(record=True) as caught, run_scope(input_arguments(argv)), \
                use_words(CLI_WORDS):
            rv = _check_outputs(argv)  # up front: before any work
            if rv is None:
                rv = self._main(args, prog_name, complete_var, **extra)
        if rv in (0, None):  # an error line stands alone: warnings only after a success
            show_warnings(caught)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)

    def _main(self, args, prog_name, complete_var, **extra):
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _cx.NoArgsIsHelpError as exc:
            print(exc.ctx.get_help() if exc.ctx else exc.format_message())
            rv = 0 if exc.ctx is None else exc.exit_code
        except _cx.ClickException as exc:
            ctx = getattr(exc, "ctx", None)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            message = " ".join(exc.format_message().split())
            Console(stderr=True).print(f"[bold red]error:[/] {escape(message)}{escape(hint)}",
                                       highlight=False, soft_wrap=True)
            rv = exc.exit_code
        except typer.Abort:
            Console(stderr=True).print("[bold red]error:[/] aborted", highlight=False)
            rv = 1
        return rv


OUTPUT_OPTIONS = ("-o", "--output", "--out", "--plot", "--report")


def input_arguments(argv: list[str]) -> list[str]:
    """The command-line words that may name inputs of the run: every word, and every
    ``--option=value`` value, except the values of the output options (:data:`OUTPUT_OPTIONS`).
    The output gate (:func:`boundcalc.files.atomic_write.check_output`) keeps each output off them; words
    that name no existing file or folder are ignored there."""
    out, skip = [], False
    for word in map(str, argv):
        if skip:
            skip = False
            continue
        if word in OUTPUT_OPTIONS:
            skip = True
            continue
        name, eq, value = word.partition("=")
        if word.startswith("--") and eq:
            if name not in OUTPUT_OPTIONS:
                out.append(value)
            continue
        if word.startswith("-o") and not word.startswith("--"):
            continue  # -oFILE
        out.append(word)
    return out


def output_arguments(argv: list[str]) -> list[str]:
    """The values of the output options in ``argv``."""
    out = []
    for j, word in enumerate(map(str, argv)):
        name, eq, value = word.partition("=")
        if word in OUTPUT_OPTIONS and j + 1 < len(argv):
            out.append(str(argv[j + 1]))
        elif eq and name in OUTPUT_OPTIONS:
            out.append(value)
    return out


def _check_outputs(argv: list[str]) -> int | None:
    """Run the output gate on every output option's value before the command starts: an
    output that is an input of the run, or a read-only file, is refused before any work."""
    from ..files.atomic_write import check_output

    try:
        for value in output_arguments(argv):
            check_output(value)
    except BoundcalcError as exc:
        Console(stderr=True).print(f"[bold red]error:[/] {escape(one_line(str(exc)))}",
                                   highlight=False, soft_wrap=True)
        return exc.exit_code
    return None


def show_warnings(caught: list, console: Console | None = None) -> None:
    """Each distinct warning of a successful command as one escaped line on stderr (or
    ``console``), never with the source line Python's own format adds."""
    console = console or Console(stderr=True)
    seen = set()
    for w in caught:
        key = (w.category.__name__, str(w.message))
        if key in seen:
            continue
        seen.add(key)
        console.print(f"[yellow]warning:[/] {escape(one_line(key[1], 300))}",
                      highlight=False, soft_wrap=True)


_METAVARS = {int: "N", float: "X", str: "TEXT"}


def _metavar(param: Any) -> str:
    """A short placeholder for an option's value: N, X, TEXT, PATH (click's style)."""
    desc = getattr(param, "type_descriptor", None)
    ann = getattr(desc, "annotation", None)
    if getattr(desc, "is_path", False):
        return "PATH"
    inner = getattr(ann, "__args__", None)
    if inner and len(inner) == 1:  # list[float] → X (the option is repeatable)
        ann = inner[0]
    return _METAVARS.get(ann, "VALUE")


def _range_text(param: Any) -> str | None:
    lo, hi = getattr(param, "min", None), getattr(param, "max", None)
    if lo is not None and hi is not None:
        return f"{lo} to {hi}"
    return f"≥ {lo}" if lo is not None else (f"≤ {hi}" if hi is not None else None)


def tidy_help(command: Any) -> None:
    """Help that reads at 80 columns, click-style: flags show no '<bool>' type, values a short
    placeholder (N, X, TEXT, PATH) instead of '<int range> [x>=2]' (the range moves into the
    text), and arguments read MODEL in the usage line, not '{model}'. Idempotent."""
    if getattr(command, "_boundcalc_tidy", False):
        return
    command._boundcalc_tidy = True
    get_help_option = getattr(command, "get_help_option", None)
    if get_help_option is not None:
        def tidy_help_option(ctx: Any, _orig: Callable = get_help_option) -> Any:
            opt = _orig(ctx)
            if opt is not None:
                opt.display_type_rich = lambda ctx: None
            return opt

        command.get_help_option = tidy_help_option
    for param in getattr(command, "params", []):
        if getattr(param, "param_type_name", "") == "argument":
            name = param.metavar or (param.name or "").upper()
            param.metavar = name
            param.display_type_rich = lambda ctx: None
            param._usage_display_name = (lambda n=name, p=param:
                                         (n if p.required else f"[{n}]")
                                         + ("..." if p.nargs != 1 else ""))
            continue
        if getattr(param, "is_flag", False) or getattr(param, "is_bool_flag", False):
            param.display_type_rich = lambda ctx: None
            continue
        rng = _range_text(param)
        if rng is not None:
            param._get_number_range_help_str = lambda: None
            param.help = (param.help or "").rstrip() + f" ({rng})"
        if param.metavar is None:
            param.metavar = _metavar(param)
    for sub in getattr(command, "commands", {}).values():
        tidy_help(sub)


app = typer.Typer(
    cls=OneLineErrors,
    name="boundcalc",
    help=(
        "Turn published generalization bounds for Transformers into honest numbers for one "
        "trained model.\n\nEvery number is labelled: [bold]certified[/] (a valid bound with "
        "probability ≥ 1−δ under the listed assumptions), [bold]conditional[/] (a bound only "
        "if its named conditions hold, which cannot be checked), [bold]rate[/] (an O(·) "
        "statement with its hidden constant set by you) or [bold]proxy[/] (a complexity "
        "measure, not a bound)."
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)

def reflow_help(doc: str | None) -> str | None:
    """A docstring as help text that wraps to the terminal: Typer keeps the line breaks of every
    paragraph after the first, so source lines of ~95 columns came out ragged at 80. Lines of a
    paragraph are joined; a paragraph that is a list (lines starting with '- ', '* ' or '• ') or is
    indented stays as written."""
    if not doc:
        return doc
    out = []
    for para in inspect.cleandoc(doc).split("\n\n"):
        lines = para.split("\n")
        if any(ln.startswith((" ", "- ", "* ", "• ", "\b")) for ln in lines[1:]):
            out.append(para)
        else:
            out.append(" ".join(ln.strip() for ln in lines))
    return "\n\n".join(out)


def reflow_command_help(typer_app: typer.Typer) -> None:
    """Apply :func:`reflow_help` to every registered command's docstring."""
    for info in typer_app.registered_commands:
        if info.help is None and info.callback is not None:
            info.callback.__doc__ = reflow_help(info.callback.__doc__)


class SafeConsole(Console):
    """A console that never lets a control character from data reach the terminal: every text
    segment (titles, tensor names, ids, paths: anything from a file or the command line) has its
    control characters written as escapes (``\\x1b``); rich's own styling is untouched."""

    def _render_buffer(self, buffer):  # type: ignore[override]
        from rich.segment import Segment

        from ..errors import printable

        return super()._render_buffer(
            seg if seg.control else Segment(printable(seg.text), seg.style, seg.control)
            for seg in buffer)


console = SafeConsole()
err_console = SafeConsole(stderr=True)


def fail(message: str, code: int = 2) -> None:
    """Print one line on stderr and exit with ``code``."""
    err_console.print(f"[bold red]error:[/] {escape(one_line(message))}", highlight=False,
                      soft_wrap=True)
    raise typer.Exit(code)


# a library error's ``column`` attribute (a data column the file lacks) → the flag naming it
COLUMN_FLAGS = {"text": "--text-column", "label": "--label-column"}


def guarded(fn: Callable[[], Any]) -> Any:
    """Run ``fn``; turn a :class:`BoundcalcError` (and a few OS errors) into one line + exit code."""
    try:
        return fn()
    except BoundcalcError as exc:  # the whole message, control characters escaped, never cut
        message = str(exc) or exc.__class__.__name__
        flag = COLUMN_FLAGS.get(getattr(exc, "column", None))
        if flag:  # a data column the file lacks: name the flag that chooses it
            message += f"; choose the {exc.column} column with {flag}"
        fail(message, exc.exit_code)
    except FileNotFoundError as exc:
        fail(f"{shown(exc.filename)}: no such file", 2)
    except OSError as exc:  # a full disk, a name too long, a parent that is a file, ...
        fail(f"{shown(exc.filename) if exc.filename else 'file'}: "
             f"{exc.strerror or exc.__class__.__name__}", 2)
    except MemoryError:
        fail("out of memory; lower the input sizes or raise --memory-budget", 8)
    except RecursionError:
        fail("input nested too deeply", 2)
    except (ArithmeticError, ValueError, TypeError, KeyError, IndexError, RuntimeError) as exc:
        # a bug, not bad input: still one line and a distinct exit code, never a traceback
        detail = str(exc).splitlines()[0][:200] if str(exc) else ""
        fail(f"internal error ({exc.__class__.__name__}: {detail}); please report it with the "
             "command line", 70)


def emit_json(obj: Any) -> None:
    """Write ``obj`` as JSON to stdout (finite numbers only; infinities become strings)."""
    from ..result import jsonable

    sys.stdout.write(json.dumps(jsonable(obj), indent=2, sort_keys=False) + "\n")


_state: dict[str, Any] = {"formulas": None, "replace": None, "quiet": False}


def version_text() -> str:
    """'boundcalc VERSION' (the installed package's version)."""
    from .. import __version__

    return f"boundcalc {__version__}"


def _print_version(value: bool) -> None:
    if value:
        console.print(version_text(), highlight=False)
        raise typer.Exit(0)


@app.command("version")
def version_cmd() -> None:
    """Print the version of boundcalc."""
    console.print(version_text(), highlight=False)


@app.callback()
def _global_options(
    version: bool = typer.Option(
        False, "--version", "-V", is_eager=True, callback=_print_version,
        help="Print the version and exit."),
    formulas: list[str] = typer.Option(
        None, "--formulas", metavar="DIR",
        help="Also load the formula files in DIR (a folder or one .toml), on top of the bundled "
             "formulas and $BOUNDCALC_FORMULAS (repeatable).",
    ),
    replace: bool = typer.Option(
        False, "--replace",
        help="Let an entry from --formulas / $BOUNDCALC_FORMULAS replace a bundled entry with "
             "the same id (without it, a repeated id is an error). Also BOUNDCALC_REPLACE=1.",
    ),
    quiet: bool = typer.Option(
        False, "--quiet", "-q", help="No progress bar or stage messages on stderr."),
    memory_budget: Optional[str] = typer.Option(
        None, "--memory-budget", metavar="SIZE",
        help="Refuse inputs whose declared size needs more memory than SIZE (e.g. 4G). "
             "Default: 1G plus the model's largest tensor, or $BOUNDCALC_MEMORY_BUDGET.",
    ),
    time_budget: Optional[str] = typer.Option(
        None, "--time-budget", metavar="TIME",
        help="Refuse work planned to take longer than TIME even at an optimistic speed "
             "(Monte Carlo draws, Hessian probes, bootstrap; e.g. 90s, 30m, 2h). Default: 1h, "
             "or $BOUNDCALC_TIME_BUDGET.",
    ),
) -> None:
    _state["formulas"] = list(formulas) if formulas else None
    _state["replace"] = True if replace else None
    _state["quiet"] = quiet
    from ..limits import parse_duration, parse_size, set_memory_budget, set_time_budget

    set_memory_budget(guarded(lambda: parse_size(memory_budget))
                      if memory_budget is not None else None)  # "" is given, refused
    set_time_budget(guarded(lambda: parse_duration(time_budget))
                    if time_budget is not None else None)


def registry(symbolic: bool = True):
    """The registry for this invocation (errors become one-line messages). ``symbolic=False``:
    plain trees from the cache, no SymPy (for commands that only evaluate)."""
    from ..registry import load_registry
    from ..registry.registry import default_formula_dirs

    return guarded(lambda: load_registry(default_formula_dirs(_state["formulas"]),
                                         replace=_state["replace"], symbolic=symbolic))
