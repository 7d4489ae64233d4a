"""Solver registry keyed by (system, solver name), with each solver's declared parameters.

Solver modules register themselves with ``@register("mapping", "heft")``. Modules are imported
lazily on first lookup (see ``SOLVER_MODULES``) so that importing pipeplan stays cheap; a
solver module imports its optional library (ortools, pulp, pymoo) only inside the solve, so a
missing library disables just the solvers whose ``requires`` names it.

Parameters are read from the solver function's keyword-only arguments: their names, defaults,
and allowed values where the annotation is a ``Literal``; every other parameter's values (type,
range, finiteness) are declared once in ``VALUES`` by its name (a test requires an entry for
each). ``pipeplan.solve`` and the bench's suite planner refuse any other keyword, and a value
outside its ``Literal`` or its range, with an InputError naming the parameter, before any work. The
common options are honoured as declared: a solver without ``time_limit`` runs to completion
(the polynomial heuristics), one without ``seed`` is deterministic, one without ``threads``
uses one thread; ``warm_start`` given to a solver that declares none is refused.
"""
from __future__ import annotations

import importlib
import inspect
import math
import numbers
import typing
from dataclasses import dataclass, field
from typing import Callable

from pipeplan.core.errors import InputError
from pipeplan.core.vocabulary import MAPPING_AXES, MAPPING_KEYS, SYSTEMS

# Modules that hold solvers, per system; imported on first use.
SOLVER_MODULES: dict[str, tuple[str, ...]] = {
    "mapping": (
        "pipeplan.solvers.mapping.single",
        "pipeplan.solvers.mapping.heft",
        "pipeplan.solvers.mapping.pipeline_dp",
        "pipeplan.solvers.mapping.milp",
        "pipeplan.solvers.mapping.nsga2",
        "pipeplan.solvers.mapping.cpsat",
    ),
    "gradcode": ("pipeplan.solvers.gradcode.constructions", "pipeplan.solvers.gradcode.cpsat",
                 "pipeplan.solvers.gradcode.milp", "pipeplan.solvers.gradcode.heterogeneous",
                 "pipeplan.solvers.gradcode.general_assignment"),
    "rollout": ("pipeplan.solvers.rollout.online", "pipeplan.solvers.rollout.cpsat",
                "pipeplan.solvers.rollout.step_plan", "pipeplan.solvers.rollout.lns"),
    "multi": ("pipeplan.solvers.mapping.multi.baselines", "pipeplan.solvers.mapping.multi.nsga2",
              "pipeplan.solvers.mapping.multi.cpsat", "pipeplan.solvers.mapping.multi.milp"),
}

COMMON = ("time_limit", "seed", "threads", "warm_start")


@dataclass(frozen=True)
class Values:
    """What a parameter accepts besides None (where its default is None) and ``words``:
    ``kind`` "int" (a whole number), "float" (a finite number; ``above``: ``lo`` itself
    excluded), "bool", "table" (of finite numbers keyed by ``words``; ``any``: of anything),
    "axes" (a list of 2 to 3 distinct ``words``), from ``lo`` to ``hi``."""
    kind: str
    lo: float | None = None
    hi: float | None = None
    above: bool = False
    words: tuple = ()
    any: bool = False

    def fault(self, value) -> str | None:
        """Why ``value`` is refused, or None."""
        if isinstance(value, str) and value in self.words and self.kind not in ("table", "axes"):
            return None
        if self.kind == "str":
            return f"takes {' or '.join(map(repr, self.words))}, got {_short(value)}"
        if self.kind == "bool":
            return None if isinstance(value, bool) else f"takes true or false, got {_short(value)}"
        if self.kind == "table":
            if not isinstance(value, dict):
                return f"takes a table, got {_short(value)}"
            for key, v in value.items():
                if not self.any and key not in self.words:
                    return f"takes a table keyed by {', '.join(self.words)}, got key {_short(key)}"
                if not self.any and not _finite(v):
                    return f"takes a table of finite numbers, got {key} = {_short(v)}"
            return None
        if self.kind == "axes":
            if (not isinstance(value, (list, tuple)) or not 2 <= len(value) <= 3
                    or any(v not in self.words for v in value) or len(set(value)) != len(value)):
                return f"takes two or three distinct of {', '.join(self.words)}, got {_short(value)}"
            return None
        whole = self.kind == "int"
        if isinstance(value, bool) or not isinstance(value, numbers.Integral if whole else numbers.Real) \
                or not _finite(value) or (self.lo is not None and (value <= self.lo if self.above else value < self.lo)) \
                or (self.hi is not None and value > self.hi):
            return f"takes {self.want()}, got {_short(value)}"
        return None

    def want(self) -> str:
        """``a whole number from 1 to 1,000,000,000 or 'auto'`` and the like."""
        lo = "" if self.lo is None else f" {'above' if self.above else 'from'} {_num(self.lo)}"
        hi = "" if self.hi is None else f" {'to' if lo else 'at most'} {_num(self.hi)}"
        words = "".join(f" or {w!r}" for w in self.words)
        return f"{'a whole' if self.kind == 'int' else 'a finite'} number{lo}{hi}{words}"


def _num(x: float) -> str:
    return f"{int(x):,}" if x == int(x) and abs(x) >= 1 else f"{x:g}"


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _finite(value) -> bool:
    try:
        return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    except OverflowError:               # an integer beyond float range
        return False


MAX_WHOLE = 10**9    # counts of moves, evaluations, generations, weight versions, groups
# Every parameter a solver declares besides the common options and its Literal ones, by name
# (``(system, name)`` first where a system's meaning differs); ``tests/core/test_solver_params``
# requires an entry for each, so a new parameter cannot escape the up-front check.
VALUES: dict[str | tuple[str, str], Values] = {
    "work_limit": Values("float", 0, above=True),                  # CP-SAT deterministic seconds
    "node_limit": Values("int", 1, 2**31 - 1),                      # HiGHS's mip_max_nodes: a 32-bit int
    "team_work": Values("float", 0, above=True),
    "scenarios": Values("int", 1, 10_000),                          # (scenarios x workers) delay draws
    "tries": Values("int", 1, 10**6),
    "degree": Values("int", 1, 10_000),                             # at most n, checked when solved
    "max_stages": Values("int", 1, MAX_WHOLE),
    "pop_size": Values("int", 1, 100_000),
    "generations": Values("int", 1, MAX_WHOLE),
    "max_evaluations": Values("int", 1, MAX_WHOLE),
    "objectives": Values("axes", words=MAPPING_AXES),
    "bounds": Values("table", words=tuple(MAPPING_KEYS.values())),
    "tie_break": Values("str", words=("default", *MAPPING_AXES)),   # another axis than the objective
    "freq": Values("str", words=("max", "min")),
    "shared_pus": Values("bool"),
    "dvfs": Values("bool"),
    "staleness": Values("int", 0, MAX_WHOLE),
    "frontier": Values("int", 1, MAX_WHOLE),
    "alpha": Values("float", 0, 1),
    "held": Values("int", 0, MAX_WHOLE, words=("auto",)),
    "evaluations": Values("int", 0, MAX_WHOLE),
    "sequence_moves": Values("int", 0, MAX_WHOLE),
    "prove_s": Values("float", 0, 1e6),
    "part_s": Values("float", 0, 1e6, above=True),
    "patience": Values("int", 1, MAX_WHOLE),
    "start": Values("table", any=True),                             # a plan, checked against the round
    "tau": Values("float", 0, 1e6, above=True),                     # seconds per token
    "time_unit_s": Values("float", 1e-6, 1e3),                      # the CP-SAT model's integer time unit
}


@dataclass(frozen=True)
class Param:
    name: str
    default: object
    choices: tuple | None = None     # the values of a Literal annotation
    values: Values | None = None     # else its VALUES entry
    nullable: bool = False           # None allowed: the default, or the annotation holds None

    def describe(self) -> str:
        allowed = f" in {{{', '.join(map(repr, self.choices))}}}" if self.choices else ""
        return f"{self.name}={self.default!r}{allowed}"

    def fault(self, value) -> str | None:
        """Why ``value`` is refused (not one of the choices, or outside the declared values), or None."""
        if self.choices is not None:
            return None if value in self.choices else f"accepts {', '.join(map(repr, self.choices))}, got {value!r}"
        if value is None and self.nullable:
            return None
        return None if self.values is None else self.values.fault(value)


def declared_params(func: Callable, kind: str = "") -> dict[str, Param]:
    """The keyword-only parameters of ``func`` (a solver takes ``problem`` first, then these),
    with their ``VALUES`` entry."""
    hints = typing.get_type_hints(func)
    out = {}
    for name, p in inspect.signature(func).parameters.items():
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            raise TypeError(f"{func.__qualname__}: solvers declare their parameters, no **kwargs")
        if p.kind is not inspect.Parameter.KEYWORD_ONLY:
            continue
        hint = hints.get(name)
        choices = typing.get_args(hint) if typing.get_origin(hint) is typing.Literal else None
        nullable = p.default is None or type(None) in typing.get_args(hint)
        out[name] = Param(name, p.default, choices, VALUES.get((kind, name), VALUES.get(name)), nullable)
    return out


@dataclass(frozen=True)
class SolverInfo:
    kind: str
    name: str
    func: Callable
    exact: bool
    description: str
    requires: tuple[str, ...] = ()
    params: dict[str, Param] = field(default_factory=dict)

    def available(self) -> tuple[bool, str]:
        """(True, "") when every required library imports, else (False, reason)."""
        for mod in self.requires:
            try:
                importlib.import_module(mod)
            except ImportError as exc:
                return False, f"needs {mod} ({exc})"
        return True, ""

    def own_params(self) -> dict[str, Param]:
        """The solver's parameters besides the common options."""
        return {k: p for k, p in self.params.items() if k not in COMMON}

    def check_params(self, given: dict, source: str = "") -> None:
        """InputError for a keyword the solver does not declare or a value it does not allow."""
        source = source or f"solver {self.kind}/{self.name}"
        for key, value in given.items():
            if key == "warm_start" and value is None:
                continue
            param = self.params.get(key)
            if param is None:
                takes = ", ".join(p.describe() for p in self.own_params().values()) or "none"
                what = "takes no warm start" if key == "warm_start" else "has no parameter of this name"
                raise InputError(source, key, f"{self.name} {what} (its parameters: {takes})")
            if key not in COMMON and (fault := param.fault(value)):
                raise InputError(source, key, f"{self.name} {fault}")


_REGISTRY: dict[tuple[str, str], SolverInfo] = {}
_loaded: set[str] = set()


def register(kind: str, name: str, *, exact: bool = False, description: str = "",
             requires: tuple[str, ...] = ()):
    def deco(func: Callable) -> Callable:
        _REGISTRY[(kind, name)] = SolverInfo(kind, name, func, exact,
                                             description or (func.__doc__ or "").strip().split("\n")[0],
                                             requires, declared_params(func, kind))
        return func
    return deco


def _load(kind: str) -> None:
    if kind in _loaded:
        return
    for mod in SOLVER_MODULES.get(kind, ()):
        importlib.import_module(mod)
    _loaded.add(kind)


def solvers(kind: str | None = None) -> list[SolverInfo]:
    kinds = [kind] if kind else list(SYSTEMS)
    for k in kinds:
        _load(k)
    return sorted((s for s in _REGISTRY.values() if s.kind in kinds), key=lambda s: (s.kind, s.name))


def get_solver(kind: str, name: str) -> SolverInfo:
    _load(kind)
    try:
        return _REGISTRY[(kind, name)]
    except KeyError:
        known = ", ".join(s.name for s in solvers(kind))
        raise InputError("--solver", "", f"unknown {kind} solver {name!r} (known: {known})") from None
