"""``pipeplan.solve``: the one entry point to every solver."""
from __future__ import annotations

import time

from pipeplan.core.errors import InputError, brief_value, crash_message
from pipeplan.core.io import finite_number
from pipeplan.core.param_values import MAX_SEED, check_seed
from pipeplan.core.registry import check_problem_params, checked_warm_start, get_solver
from pipeplan.core.result import Quality, SolveResult, Termination

MAX_THREADS = 4096          # solver threads (CP-SAT workers, HiGHS threads)


def check_limits(time_limit: float | None, threads: int = 1, option: str = "--time-limit",
                 zero_ok: bool = False, seed: int | None = None) -> None:
    """``option`` (``--time-limit``): None or a finite number of seconds > 0 (>= 0 with
    ``zero_ok``); ``--threads``: an integer from 1 to MAX_THREADS; ``--seed`` (when given): an
    integer from 0 to MAX_SEED."""
    # finite_number: False for an integer past float range too (10**400 had raised OverflowError)
    if time_limit is not None and (not finite_number(time_limit) or time_limit < 0
                                   or (time_limit == 0 and not zero_ok)):
        least = "a finite number of seconds >= 0" if zero_ok else "a positive number of seconds"
        raise InputError(option, "", f"must be {least}, got {brief_value(time_limit)}")
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= MAX_THREADS:
        raise InputError("--threads", "", f"must be an integer from 1 to {MAX_THREADS}, got {brief_value(threads)}")
    if seed is not None:
        check_seed(seed)


def _plain(value):
    """A numpy scalar (np.int64(5) for node_limit or the seed) as the Python number it holds: a
    parameter had passed the declared check and then failed the solver's own isinstance(int)
    test inside, and a seed had been refused as no integer."""
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()
    return value


def solve(problem, solver: str, *, time_limit: float | None = None, seed: int = 0,
          threads: int = 1, warm_start=None, **params) -> SolveResult:
    """Solve ``problem`` (any formulation's problem object, with ``kind`` and ``name``) with the
    registered solver ``solver``.

    Raises InputError, before any work, for bad options: an unknown solver, a time limit or
    thread count out of range, a parameter the solver does not declare (or a value outside its
    allowed set), a warm start given to a solver that takes none. Once the solver runs, its
    failure becomes a result with termination ``error`` and the message, never an exception.
    ``time_limit``, ``seed`` and ``threads`` reach the solver when it declares them (see
    ``pipeplan.core.registry``); the result's ``params`` records what it was called with."""
    seed, time_limit, threads = _plain(seed), _plain(time_limit), _plain(threads)
    if seed is None:      # check_limits skips a None seed; the solvers need one (None had failed inside ten)
        raise InputError("--seed", "", f"must be an integer from 0 to {MAX_SEED}, got None")
    check_limits(time_limit, threads, seed=seed)
    # a problem object and a solver name (None had been an AttributeError, a list a TypeError)
    if not isinstance(getattr(problem, "kind", None), str) or not isinstance(getattr(problem, "name", None), str):
        raise InputError("problem", "", f"expected a problem object (with kind and name), got {brief_value(problem)}")
    if not isinstance(solver, str):
        raise InputError("solver", "", f"expected a solver name, got {brief_value(solver)}")
    params = {k: _plain(v) for k, v in params.items()}
    info = get_solver(problem.kind, solver)
    info.check_params({**params, "warm_start": warm_start})
    warm_start = checked_warm_start(problem, warm_start)
    check_problem_params(problem, solver, params)
    common = {"time_limit": time_limit, "seed": seed, "threads": threads, "warm_start": warm_start}
    passed = {k: v for k, v in common.items() if k in info.params}
    call = {"time_limit": time_limit, "seed": seed, "threads": threads, **params}
    ok, why = info.available()
    if not ok:
        return SolveResult(problem.kind, problem.name, solver, Termination.ERROR, Quality.NONE,
                           params=call, message=why)
    start = time.perf_counter()
    try:
        result = info.func(problem, **passed, **params)
    except Exception as exc:  # a solver crash is a result, not a crash of the command
        return SolveResult(problem.kind, problem.name, solver, Termination.ERROR, Quality.NONE,
                           params=call, wall_time_s=time.perf_counter() - start,
                           message=crash_message(exc))
    result.wall_time_s = time.perf_counter() - start
    result.params = {**call, **result.params}
    return result
