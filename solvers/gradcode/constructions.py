"""The published constructions as registered solvers: FR, CR, PGC-FR, PGC-CR, cyclic-MDS and the
sparse-graph approximate code (n and s from the problem; k must equal n). Heterogeneous worker data is ignored by construction; the evaluator
still scores the code on the problem's workers. CR's seed search stops at the time limit (less
the re-scoring's share); past the limit the verifier checks fewer straggler sets."""
from __future__ import annotations

from typing import Literal

from pipeplan.core.deadline import Deadline
from pipeplan.core.errors import InputError
from pipeplan.core.registry import problem_params_check, register
from pipeplan.core.result import Termination
from pipeplan.formulations.gradcode.gradient_code import check_lstsq_size
from pipeplan.formulations.gradcode.placement import pipelined
from pipeplan.solvers.gradcode.approximate import sparse_graph_code
from pipeplan.solvers.gradcode.common import scored_result, search_deadline
from pipeplan.solvers.gradcode.cyclic import best_cyclic
from pipeplan.solvers.gradcode.cyclic_mds import cyclic_mds
from pipeplan.solvers.gradcode.fractional import fractional_repetition
from pipeplan.solvers.gradcode.pipelining import pgc_cr, pgc_fr


def _square(problem, scheme: str) -> None:
    if problem.k != problem.n:
        raise ValueError(f"{scheme} needs k = n partitions (problem has k = {problem.k}, n = {problem.n})")


@register("gradcode", "fr", description="fractional repetition (Tandon et al. 2017): groups of s+1 workers")
def solve_fr(problem, *, time_limit=None):
    clock = Deadline(time_limit)
    _square(problem, "FR")
    return scored_result(problem, "fr", fractional_repetition(problem.n, problem.s), deadline=clock)


@register("gradcode", "cr", description="cyclic repetition (Tandon et al. 2017): random H, best of several seeds")
def solve_cr(problem, *, seed: int = 0, tries: int = 8, time_limit=None):
    search = search_deadline(time_limit, problem)
    _square(problem, "CR")
    check_lstsq_size(problem.n, problem.name, "n", "cr")
    code, v = best_cyclic(problem.n, problem.s, seed=seed, tries=tries, deadline=search)
    return scored_result(problem, "cr", code, termination=_tries_termination(code), params={"tries": tries},
                         verification=v, stopped_by=_stopped_by(code))


@register("gradcode", "pgc-fr", description="pipelined FR: one partition per worker per step, round-robin")
def solve_pgc_fr(problem, *, time_limit=None):
    clock = Deadline(time_limit)
    _square(problem, "PGC-FR")
    return scored_result(problem, "pgc-fr", pgc_fr(problem.n, problem.s), deadline=clock)


@register("gradcode", "pgc-cr", description="pipelined CR: one partition per step; decoder lstsq or linear")
def solve_pgc_cr(problem, *, seed: int = 0, tries: int = 8, decoder: Literal["lstsq", "linear"] = "lstsq",
                 time_limit=None):
    clock, search = Deadline(time_limit), search_deadline(time_limit, problem)
    _square(problem, "PGC-CR")
    params = {"tries": tries, "decoder": decoder}
    if decoder != "lstsq":
        return scored_result(problem, "pgc-cr", pgc_cr(problem.n, problem.s, decoder=decoder), params=params,
                             deadline=clock)
    check_lstsq_size(problem.n, problem.name, "n", "pgc-cr")
    code, v = best_cyclic(problem.n, problem.s, seed=seed, tries=tries, deadline=search)
    # the schedule leaves B and the decoder as they are, so CR's verification holds
    return scored_result(problem, "pgc-cr", pipelined(code, "pgc-cr"), termination=_tries_termination(code),
                         params=params, verification=v, stopped_by=_stopped_by(code))


@register("gradcode", "cyclic-mds", description="cyclic-MDS (Raviv et al. 2018): CR's support, deterministic "
                                                   "well-conditioned B, least squares")
def solve_cyclic_mds(problem, *, time_limit=None):
    clock = Deadline(time_limit)
    _square(problem, "cyclic-MDS")
    check_lstsq_size(problem.n, problem.name, "n", "cyclic-mds")
    return scored_result(problem, "cyclic-mds", cyclic_mds(problem.n, problem.s), deadline=clock)


@problem_params_check("gradcode", "approx")
def _check_degree(problem, params: dict) -> None:
    degree = params.get("degree")
    if degree is not None and not 1 <= degree <= problem.n:
        raise InputError(problem.source or problem.name, "degree", f"must be in 1..n = {problem.n}, got {degree}")


@register("gradcode", "approx", description="approximate code on a random d-regular graph (Charles et al. 2017, "
                                             "Raviv et al. 2018): error reported, not exact")
def solve_approx(problem, *, degree: int | None = None, seed: int = 0,
                 decoder: Literal["lstsq", "linear"] = "lstsq", time_limit=None):
    """``decoder``: least squares (the optimal decoder, the default) or the fixed weights; either
    way the result is feasible with its decoding error in the message, never called exact."""
    clock = Deadline(time_limit)
    _square(problem, "approx")
    if decoder == "lstsq":
        check_lstsq_size(problem.n, problem.name, "n", "approx")
    code = sparse_graph_code(problem.n, problem.s, degree=degree, seed=seed, decoder=decoder)
    return scored_result(problem, "approx", code, params={"degree": code.meta["degree"], "decoder": decoder},
                         deadline=clock)


def _stopped_by(code) -> str | None:
    """"time" when the wall clock cut the seeds short of ``tries`` (the work limit, which ends
    the run ``completed``)."""
    return "time" if code.meta["tried"] < code.meta["tries"] else None


def _tries_termination(code) -> Termination:
    """time_limit when the limit cut the random seeds short of ``tries``."""
    return Termination.TIME_LIMIT if code.meta["tried"] < code.meta["tries"] else Termination.COMPLETED
