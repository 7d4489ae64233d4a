"""What each solver parameter accepts, declared once by its name: the values besides a
``Literal`` annotation's (type, range, finiteness). ``pipeplan.core.registry`` attaches each
solver parameter's entry, and ``pipeplan.solve`` and the bench's suite planner check a value
against it before any work; ``tests/core/test_solver_params`` requires an entry for every
parameter a solver declares besides the common options and its ``Literal`` ones."""
from __future__ import annotations

import numbers
from dataclasses import dataclass

from pipeplan.core.errors import InputError, brief_value
from pipeplan.core.io import finite_number
from pipeplan.core.vocabulary import MAPPING_AXES, MAPPING_KEYS


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
            return f"takes {' or '.join(map(repr, self.words))}, got {brief_value(value)}"
        if self.kind == "bool":
            return None if isinstance(value, bool) else f"takes true or false, got {brief_value(value)}"
        if self.kind == "table":
            if not isinstance(value, dict):
                return f"takes a table, got {brief_value(value)}"
            for key, v in value.items():
                if not self.any and key not in self.words:
                    return f"takes a table keyed by {', '.join(self.words)}, got key {brief_value(key)}"
                if not self.any and not finite_number(v):
                    return f"takes a table of finite numbers, got {key} = {brief_value(v)}"
            return None
        if self.kind == "axes":
            if (not isinstance(value, (list, tuple)) or not 2 <= len(value) <= 3
                    or any(v not in self.words for v in value) or len(set(value)) != len(value)):
                return f"takes two or three distinct of {', '.join(self.words)}, got {brief_value(value)}"
            return None
        whole = self.kind == "int"
        if isinstance(value, bool) or not isinstance(value, numbers.Integral if whole else numbers.Real) \
                or not finite_number(value) or (self.lo is not None and (value <= self.lo if self.above else value < self.lo)) \
                or (self.hi is not None and value > self.hi):
            return f"takes {self.want()}, got {brief_value(value)}"
        return None

    def want(self) -> str:
        """``a whole number from 1 to 1,000,000,000 or 'auto'`` and the like."""
        lo = "" if self.lo is None else f" {'above' if self.above else 'from'} {_num(self.lo)}"
        hi = "" if self.hi is None else f" {'to' if lo else 'at most'} {_num(self.hi)}"
        words = "".join(f" or {w!r}" for w in self.words)
        return f"{'a whole' if self.kind == 'int' else 'a finite'} number{lo}{hi}{words}"


def _num(x: float) -> str:
    return f"{int(x):,}" if x == int(x) and abs(x) >= 1 else f"{x:g}"


MAX_WHOLE = 10**9    # counts of moves, evaluations, generations, weight versions, groups
MAX_TRIES = 10**6     # CR codes tried per seed search (each a verification)
MAX_SEED = 2 ** 31 - 1      # CP-SAT's random_seed is a 32-bit integer; numpy takes no seed below 0


def check_seed(seed) -> None:
    """A seed as every solver takes it: an integer from 0 to MAX_SEED (-1 had been numpy's
    ValueError from inside an instance generator)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise InputError("--seed", "", f"must be an integer from 0 to {MAX_SEED}, got {brief_value(seed)}")
# Every parameter a solver declares besides the common options and its Literal ones, by name
# (``(system, name)`` first where a system's meaning differs); ``tests/core/test_solver_params``
# requires an entry for each, so a new parameter cannot escape the up-front check.
VALUES: dict[str | tuple[str, str], Values] = {
    "work_limit": Values("float", 0, above=True),                  # CP-SAT deterministic seconds
    "node_limit": Values("int", 1, 2**31 - 1),                      # HiGHS's mip_max_nodes: a 32-bit int
    "team_work": Values("float", 0, above=True),
    "scenarios": Values("int", 1, 10_000),                          # (scenarios x workers) delay draws
    "tries": Values("int", 1, MAX_TRIES),
    "degree": Values("int", 1, 10_000),                             # at most n, checked when solved
    "max_stages": Values("int", 1, MAX_WHOLE),
    "pop_size": Values("int", 1, 100_000),
    "generations": Values("int", 1, MAX_WHOLE),
    "max_evaluations": Values("int", 1, MAX_WHOLE),
    "start_evaluations": Values("int", 0, MAX_WHOLE),               # 0: no NSGA-II warm start
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
