"""Solver registry keyed by (system, solver name), with each solver's declared parameters.

Solver modules register themselves with ``@register("mapping", "heft")``. Modules are imported
lazily on first lookup (see ``SOLVER_MODULES``) so that importing pipeplan stays cheap; a
solver module imports its optional library (ortools, pulp, pymoo) only inside the solve, so a
missing library disables just the solvers whose ``requires`` names it.

Parameters are read from the solver function's keyword-only arguments: their names, defaults,
and allowed values where the annotation is a ``Literal``; every other parameter's values (type,
range, finiteness) are declared once in ``param_values.VALUES`` by its name (a test requires an entry for
each). ``pipeplan.solve`` and the bench's suite planner refuse any other keyword, and a value
outside its ``Literal`` or its range, with an InputError naming the parameter, before any work. The
common options are honoured as declared: a solver without ``time_limit`` runs to completion
(the polynomial heuristics), one without ``seed`` is deterministic, one without ``threads``
uses one thread; ``warm_start`` given to a solver that declares none is refused.
"""
from __future__ import annotations

import importlib
import inspect
import typing
from dataclasses import dataclass, field
from typing import Callable

from pipeplan.core.errors import InputError, brief_value
from pipeplan.core.param_values import VALUES, Values
from pipeplan.core.vocabulary import SYSTEMS

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
        if self.choices is not None:   # compared only as plain values (a numpy array's == had raised ValueError)
            plain = value is None or isinstance(value, (str, int, float))     # bool is an int
            return None if plain and value in self.choices else \
                f"accepts {', '.join(map(repr, self.choices))}, got {brief_value(value)}"
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


# A system's check of a warm start, ``func(problem, value) -> what the solver is given`` (an
# InputError for a value it refuses), registered by that system's solver modules with
# :func:`warm_start_check`; ``pipeplan.solve`` applies it before the solver runs.
_WARM_START_CHECKS: dict[str, Callable] = {}


def warm_start_check(kind: str):
    def deco(func: Callable) -> Callable:
        _WARM_START_CHECKS[kind] = func
        return func
    return deco


def checked_warm_start(problem, value):
    """``value`` as the solver gets it, after ``problem.kind``'s check (solvers loaded first)."""
    _load(problem.kind)
    check = _WARM_START_CHECKS.get(problem.kind)
    return value if value is None or check is None else check(problem, value)


# A solver's check of its parameters against a problem (``func(problem, params)``, an InputError
# for a value this problem rules out, as ``degree`` past approx's n workers), registered with
# :func:`problem_params_check`. ``pipeplan.solve`` applies it before the solver runs, and bench
# before its first run: a suite's bad value had been an error record per run, exit 0.
_PROBLEM_PARAMS_CHECKS: dict[tuple[str, str], Callable] = {}


def problem_params_check(kind: str, name: str):
    def deco(func: Callable) -> Callable:
        _PROBLEM_PARAMS_CHECKS[(kind, name)] = func
        return func
    return deco


def has_problem_params_check(kind: str, solver: str) -> bool:
    _load(kind)
    return (kind, solver) in _PROBLEM_PARAMS_CHECKS


def check_problem_params(problem, solver: str, params: dict) -> None:
    """InputError for a parameter value ``solver`` cannot take on ``problem`` (solvers loaded first)."""
    _load(problem.kind)
    check = _PROBLEM_PARAMS_CHECKS.get((problem.kind, solver))
    if check is not None:
        check(problem, params)


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
