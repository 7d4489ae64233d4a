"""Helpers shared by the command modules of the CLI: progress reporting, and the polish every
command's help gets (flags without a type label, allowed values read from where they are defined)."""
from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable

import typer
from typer.core import TyperGroup

from pipeplan.core.errors import InputError, SolverFailure

# --- comma lists --------------------------------------------------------------------------------


def name_list(option: str, text: str) -> list[str]:
    """The names of a comma list, refused when one is listed twice (it would run twice, or its
    second result replace the first unseen) or the list names nothing."""
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise InputError(option, "", f"no names in {text!r}")
    refuse_twice(option, names)
    return names


def refuse_twice(option: str, values: list) -> None:
    """A value listed twice in ``option`` (after parsing: 0.5 and 0.50 are one rho)."""
    twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if twice is not None:
        raise InputError(option, str(twice), "listed twice")


# --- help -------------------------------------------------------------------------------------


def _names(system: str, exact: bool | None = None) -> list[str]:
    from pipeplan.core.registry import solvers
    return [s.name for s in solvers(system) if exact is None or s.exact == exact]


def _rollout_policies() -> list[str]:
    from pipeplan.solvers.rollout import OFFLINE
    return [n for n in _names("rollout") if n not in OFFLINE]


def _schemes(training: bool) -> str:
    from pipeplan.solvers.gradcode.schemes import PLACEMENTS, TRAINING
    extra = [t for t in TRAINING if t not in PLACEMENTS]
    return ", ".join([*PLACEMENTS, "solver"]) + (f" (training also: {', '.join(extra)})" if training else "")


def _straggler_kinds() -> str:
    from pipeplan.formulations.gradcode.straggler import KINDS
    return ", ".join(KINDS)


def _workloads() -> str:
    from pipeplan.formulations.rollout.workloads import PRESETS
    return ", ".join(PRESETS)


def _models() -> str:
    from pipeplan.deploy.gradcode.models import MODELS
    return ", ".join(MODELS)


def _default_lr() -> str:
    from pipeplan.deploy.gradcode.training import DEFAULT_LR
    return ", ".join(f"{m} {lr:g}" for m, lr in DEFAULT_LR.items())


def _mapping_instances() -> str:
    from pipeplan.formulations.mapping.onnx_graph import LIGHT_MODELS
    from pipeplan.instances.catalog import measured_names
    from pipeplan.instances.paths import PLATFORMS_DIR
    measured = ", ".join(n.partition("/")[2] for n in measured_names())
    platforms = ", ".join(sorted(p.stem for p in PLATFORMS_DIR.glob("*.json")))
    return (f"khadas-vim3/{{{measured}}} (measured, block-level) or {{{platforms}}}/{{{', '.join(LIGHT_MODELS)}}} "
            "(roofline estimate, operator-level)")


def _suites() -> str:
    from pipeplan.app.bench import SUITES_DIR
    return ", ".join(sorted(p.stem for p in SUITES_DIR.glob("*.toml")))


def _limit_systems() -> str:
    from pipeplan.app.limits import SIZES
    return ", ".join(SIZES)


# Allowed values and defaults that live in modules a command imports only when it runs (the
# solver registry loads every solver module): help names them as ``{key}`` (see ``listed``) and
# they are read only when help is shown, so other commands and --version start fast.
FILLS: dict[str, Callable[[], str]] = {
    "mapping solvers": lambda: ", ".join(_names("mapping")),
    "multi solvers": lambda: ", ".join(_names("multi")),
    "rollout policies": lambda: ", ".join(_rollout_policies()),
    "gradcode exact solvers": lambda: " or ".join(_names("gradcode", exact=True)),
    "placement schemes": lambda: _schemes(training=False),
    "training schemes": lambda: _schemes(training=True),
    "straggler models": _straggler_kinds,
    "rollout workloads": _workloads,
    "gradcode models": _models,
    "default lr": _default_lr,
    "mapping instances": _mapping_instances,
    "bench suites": _suites,
    "limits systems": _limit_systems,
}
_PLACEHOLDER = re.compile(r"\{(" + "|".join(map(re.escape, FILLS)) + r")\}")


def listed(key: str) -> str:
    """The placeholder for ``FILLS[key]`` in an option's help."""
    if key not in FILLS:
        raise KeyError(f"no help fill {key!r} (known: {', '.join(FILLS)})")
    return "{" + key + "}"


def polish(command, *, fill: bool) -> None:
    """Over the command tree: flags (and --help) show no value type, as they take no value
    (typer labels every option, flags ``<bool>``); with ``fill``, placeholders become values."""
    cache: dict[str, str] = {}

    def value(match: re.Match) -> str:
        key = match.group(1)
        if key not in cache:
            cache[key] = FILLS[key]()
        return cache[key]

    todo = [command]
    while todo:
        cmd = todo.pop()
        params = list(cmd.params)
        help_option = cmd.get_help_option(typer.Context(cmd))
        for p in params + ([help_option] if help_option is not None else []):
            if getattr(p, "is_flag", False) and p.metavar is None:
                p.metavar = ""      # rich help prints the metavar, if set, in place of the type
            if fill and getattr(p, "help", None):
                p.help = _PLACEHOLDER.sub(value, p.help)
        todo.extend(getattr(cmd, "commands", {}).values())


class Group(TyperGroup):
    """The root command group: polishes the whole tree before it parses the command line."""

    def main(self, args=None, *rest, **kwargs):
        args = list(sys.argv[1:] if args is None else args)
        polish(self, fill="--help" in args)
        return super().main(args, *rest, **kwargs)


def command_text(words: str) -> str:
    """The command line as typed, for the header of a results file: ``words`` (the command's
    own, e.g. "pipeplan rollout sweep") and the arguments that followed them."""
    extra = sys.argv[len(words.split()):]
    return f"{words} {' '.join(extra)}".strip() if extra else words


# --- progress ---------------------------------------------------------------------------------

PLAIN_INTERVAL_S = 2.0   # plain progress lines: none in the first interval of steps, then at most one per interval


class progress:
    """Progress on stderr: a rich bar on a terminal (transient: erased when the block ends);
    otherwise plain lines, so that a run piped to a file or in CI is not silent for minutes and
    its log stays short. Plain lines start only once steps have been reported for
    ``interval_s`` (as git's delayed progress; counted from the first step, so that a slow
    set-up, such as loading a data set, does not use up the quiet start), then come at most one
    per interval plus the last step: a command that ends or fails sooner writes none, so its
    stderr is its error line alone, as on a terminal. stdout stays clean either way."""

    def __init__(self, label: str, *, interval_s: float = PLAIN_INTERVAL_S):
        self.label = label
        self.bar = None
        self.interval_s = interval_s
        self._printed: float | None = None   # when the last plain line was written (the first step, before one is)
        self._logging = False           # a plain line was written: the last step will be too
        self._pending: str | None = None  # the latest step not yet written

    def __enter__(self):
        if not sys.stderr.isatty():
            return self
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                            TimeElapsedColumn(), transient=True, console=Console(stderr=True))
        self.bar.__enter__()
        self.task = self.bar.add_task(self.label, total=None)
        return self

    def __call__(self, done: int, total: int | None, what: str = "") -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=done, total=total,
                            description=f"{self.label} {what}" if what else self.label)
            return
        line = f"{self.label}: {done}" + (f"/{total}" if total is not None else "") + (f" {what}" if what else "")
        now = time.monotonic()
        if self._printed is None:
            self._printed = now
        if now - self._printed >= self.interval_s or (self._logging and total is not None and done >= total):
            self._write(line, now)
        else:
            self._pending = line

    def _write(self, line: str, now: float) -> None:
        print(line, file=sys.stderr, flush=True)
        self._printed, self._pending, self._logging = now, None, True

    def __exit__(self, exc_type, *exc):
        if self.bar is not None:
            self.bar.__exit__(exc_type, *exc)
        elif self._pending is not None and self._logging and exc_type is None:   # the last step; none after an error
            self._write(self._pending, time.monotonic())
        return False


def fail_if_all_failed(what: str, results: dict) -> None:
    """After a comparison's rows are printed and written: where no solver returned a plan or
    schedule, one ``error:`` line naming the first failure and exit 1 (SolverFailure), as a
    failed ``solve`` exits 1 after its result; where some did, the failed rows say so (exit 0,
    as ``bench``). ``results``: solver name -> SolveResult."""
    if results and not any(r.objectives for r in results.values()):
        first, r = next(iter(results.items()))
        raise SolverFailure(what, f"every solver failed ({len(results)}); {first}: {r.message or r.termination.value}")
