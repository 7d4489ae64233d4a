"""PuLP solver set-up shared by the MILP models: HiGHS (in-process, with MIP starts and its
start-up banner silenced) or CBC, whichever is available."""
from __future__ import annotations

import ctypes
import os
import sys
from functools import lru_cache

import pulp

GAP_REL = 1e-7          # HiGHS stops at 1e-4 by default; the optimum must hold to 1e-6


class _HiGHS(pulp.HiGHS):
    """``pulp.HiGHS`` that hands the variables' current values to HiGHS as a MIP start (pulp's
    in-process HiGHS interface ignores them)."""

    def callSolver(self, lp):
        known = [(v.index, v.varValue) for v in lp.variables() if v.varValue is not None]
        if known:
            cols, vals = zip(*known)
            lp.solverModel.setSolution(len(cols), list(cols), list(vals))
        super().callSolver(lp)


@lru_cache(maxsize=None)
def _highs_banner_off() -> None:
    """HiGHS prints a banner on C stdout when the process makes its first Highs object, before
    ``output_flag`` can be cleared: make that first one with stdout pointing at /dev/null, so
    that stdout carries only results (the CLI prints its JSON there) and a bench of hundreds of
    runs does not print it hundreds of times. The HiGHS version is in every SolveResult."""
    import highspy
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    try:
        highspy.Highs()
        ctypes.CDLL(None).fflush(None)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def make_solver(backend: str, *, time_limit, threads, seed, warm: bool):
    if backend == "highs":
        _highs_banner_off()
        return _HiGHS(msg=False, timeLimit=time_limit, threads=threads, gapRel=GAP_REL, random_seed=seed)
    # CBC is deterministic by default and its randomCbcSeed 0 means "seed from the clock"
    options = [f"randomCbcSeed {seed}"] if seed else []
    return pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit, threads=threads, gapRel=GAP_REL,
                             warmStart=warm, options=options)


def pick_backend(backend: str) -> str:
    """``backend`` when its solver is available, else the other one."""
    checks = {"highs": lambda: pulp.HiGHS().available(), "cbc": lambda: pulp.PULP_CBC_CMD(msg=False).available()}
    if backend not in checks:
        raise ValueError(f"unknown backend {backend!r} (use highs or cbc)")
    for name in (backend, *(b for b in checks if b != backend)):
        if checks[name]():
            return name
    raise RuntimeError("neither HiGHS (highspy) nor CBC is available to PuLP")
