"""The published constructions as registered solvers: FR, CR, PGC-FR, PGC-CR (n and s from the
problem; k must equal n). Heterogeneous worker data is ignored by construction; the evaluator
still scores the code on the problem's workers."""
from __future__ import annotations

from pipeplan.registry import register
from pipeplan.result import Termination
from pipeplan.solvers.gradcode.common import scored_result
from pipeplan.solvers.gradcode.cyclic import cyclic_repetition
from pipeplan.solvers.gradcode.fractional import fractional_repetition
from pipeplan.solvers.gradcode.pipelining import pgc_cr, pgc_fr


def _square(problem, scheme: str) -> None:
    if problem.k != problem.n:
        raise ValueError(f"{scheme} needs k = n partitions (problem has k = {problem.k}, n = {problem.n})")


@register("gradcode", "fr", description="fractional repetition (Tandon et al. 2017): groups of s+1 workers")
def solve_fr(problem, **_):
    _square(problem, "FR")
    return scored_result(problem, "fr", fractional_repetition(problem.n, problem.s))


@register("gradcode", "cr", description="cyclic repetition (Tandon et al. 2017): random H, best of several seeds")
def solve_cr(problem, *, seed: int = 0, tries: int = 8, time_limit=None, **_):
    _square(problem, "CR")
    code = cyclic_repetition(problem.n, problem.s, seed=seed, tries=tries, time_limit=time_limit)
    return scored_result(problem, "cr", code, termination=_tries_termination(code), params={"tries": tries})


@register("gradcode", "pgc-fr", description="pipelined FR: one partition per worker per step, round-robin")
def solve_pgc_fr(problem, **_):
    _square(problem, "PGC-FR")
    return scored_result(problem, "pgc-fr", pgc_fr(problem.n, problem.s))


@register("gradcode", "pgc-cr", description="pipelined CR: one partition per step; decoder lstsq or linear")
def solve_pgc_cr(problem, *, seed: int = 0, tries: int = 8, decoder: str = "lstsq", time_limit=None, **_):
    _square(problem, "PGC-CR")
    code = pgc_cr(problem.n, problem.s, seed=seed, tries=tries, decoder=decoder, time_limit=time_limit)
    return scored_result(problem, "pgc-cr", code, termination=_tries_termination(code),
                         params={"tries": tries, "decoder": decoder})


def _tries_termination(code) -> Termination:
    """time_limit when the limit cut the random seeds short of ``tries``."""
    tried = code.meta.get("tried")
    return Termination.TIME_LIMIT if tried is not None and tried < code.meta["tries"] else Termination.COMPLETED
