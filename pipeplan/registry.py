"""Solver registry keyed by (problem kind, solver name).

Solver modules register themselves with ``@register("mapping", "heft")``. Modules are imported
lazily on first lookup (see ``_SOLVER_MODULES``) so that importing pipeplan stays cheap and a
solver whose library is missing only disables itself.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from pipeplan.errors import InputError

# Modules that hold solvers, per problem kind; imported on first use.
_SOLVER_MODULES: dict[str, tuple[str, ...]] = {
    "mapping": (
        "pipeplan.solvers.mapping.single",
        "pipeplan.solvers.mapping.heft",
        "pipeplan.solvers.mapping.pipeline_dp",
        "pipeplan.solvers.mapping.milp",
        "pipeplan.solvers.mapping.nsga2",
        "pipeplan.solvers.mapping.cpsat",
    ),
    "gradcode": ("pipeplan.solvers.gradcode.constructions", "pipeplan.solvers.gradcode.cpsat", "pipeplan.solvers.gradcode.milp"),
    "rollout": ("pipeplan.solvers.rollout.online", "pipeplan.solvers.rollout.cpsat"),
}


@dataclass(frozen=True)
class SolverInfo:
    kind: str
    name: str
    func: Callable
    exact: bool
    description: str
    requires: tuple[str, ...] = ()

    def available(self) -> tuple[bool, str]:
        """(True, "") when every required library imports, else (False, reason)."""
        for mod in self.requires:
            try:
                importlib.import_module(mod)
            except ImportError as exc:
                return False, f"needs {mod} ({exc})"
        return True, ""


_REGISTRY: dict[tuple[str, str], SolverInfo] = {}
_loaded: set[str] = set()


def register(kind: str, name: str, *, exact: bool = False, description: str = "",
             requires: tuple[str, ...] = ()):
    def deco(func: Callable) -> Callable:
        _REGISTRY[(kind, name)] = SolverInfo(kind, name, func, exact, description or (func.__doc__ or "").strip().split("\n")[0], requires)
        return func
    return deco


def _load(kind: str) -> None:
    if kind in _loaded:
        return
    for mod in _SOLVER_MODULES.get(kind, ()):
        importlib.import_module(mod)
    _loaded.add(kind)


def solvers(kind: str | None = None) -> list[SolverInfo]:
    kinds = [kind] if kind else list(_SOLVER_MODULES)
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
