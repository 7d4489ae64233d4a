"""Lower bounds on the trainer's finish (the end of the last update) that hold for every
admission policy and every trainer order, under the simulator's engine.

Engine work: to finish a set S of requests the engine must run their prefills (which stall
decode) and at least ``steps(S)`` decode steps, and each step costs at least
``c0 + c1*b + c2*kv`` counting only the requests of S in it. Summed over S's steps, the c1 and
c2 terms do not depend on the schedule (request i adds ``c1`` per token and ``c2*(p + j)`` at
its j-th token); the number of steps is at least the longest response of S, its tokens over
``max_num_seqs``, and the KV it holds summed over its steps (the footprint every step with
``reserve``, what is in use with ``on_demand``) over the KV capacity.

Trainer: update k can only start once the groups of the first k updates are complete, so
finish >= (time the c_k-th group can complete at the earliest) + (least time of the updates
from k on). The earliest c-th completion takes the c cheapest groups for each engine term.
"""
from __future__ import annotations

import numpy as np

from pipeplan.formulations.rollout.flowshop_bound import chain_bound, johnson_bound
from pipeplan.formulations.rollout.flowshop_bound import engine_terms as _group_terms
from pipeplan.formulations.rollout.problem import EngineModel, RolloutProblem


def earliest_completions(problem: RolloutProblem, engine: EngineModel | None = None, demands=None) -> list[float]:
    """``out[c-1]`` is a lower bound on the time by which c groups can be complete. ``engine``
    and ``demands`` (KV held per request, default the footprint) replace the problem's for the
    offline model."""
    engine = engine or problem.engine
    add, tokens, kv, longest = _group_terms(problem, engine, demands)
    c0, seqs, cap = engine.c0_s, engine.max_num_seqs, engine.kv_capacity_tokens
    per_token = sorted(a + c0 * t / seqs for a, t in zip(add, tokens))
    per_kv = sorted(a + c0 * e / cap for a, e in zip(add, kv))
    # best_longest[c-1]: the least c0 * (longest response) + (c smallest additive terms) over
    # the sets of c groups; the groups by longest response, each adding its term to the sorted
    # prefix (numpy's cumsum adds left to right, as a running sum would)
    best_longest = np.full(problem.R, np.inf)
    prefix = np.empty(0)
    for g in sorted(range(problem.R), key=lambda g: longest[g]):   # sets whose longest response is longest[g]
        prefix = np.insert(prefix, np.searchsorted(prefix, add[g], side="right"), add[g])
        np.minimum(best_longest[:prefix.size], c0 * longest[g] + np.cumsum(prefix), out=best_longest[:prefix.size])
    token_sums, kv_sums = np.cumsum(per_token), np.cumsum(per_kv)
    return [max(float(token_sums[c]), float(kv_sums[c]), float(best_longest[c])) for c in range(problem.R)]


def least_update_time(problem: RolloutProblem, n_updates: int, n_groups: int) -> float:
    """Least total time of ``n_updates`` updates that hold at least ``n_groups`` groups."""
    tr = problem.trainer
    tokens = sum(sorted(problem.group_tokens)[:n_groups])
    micro = max(n_updates, -(-tokens // tr.token_budget))
    return tr.s_per_token * tokens + tr.s_per_microbatch * micro + tr.optimizer_step_s * n_updates


def separate_bound(problem: RolloutProblem, engine: EngineModel | None = None, demands=None) -> float:
    """max over k of (earliest completion of the first k updates' groups) + (least time of the
    updates from k on), each term with its own cheapest groups."""
    done = earliest_completions(problem, engine, demands)
    sizes = problem.update_sizes()
    best, before = 0.0, 0
    for k, size in enumerate(sizes):
        ready = done[before + size - 1]
        best = max(best, ready + least_update_time(problem, len(sizes) - k, problem.R - before))
        before += size
    return best


def train_end_lower_bound(problem: RolloutProblem, engine: EngineModel | None = None, demands=None) -> float:
    """A lower bound on the train end of every schedule (fast: no solver). ``engine`` and
    ``demands`` replace the problem's for the offline model (see ``earliest_completions``)."""
    return max(separate_bound(problem, engine, demands), johnson_bound(problem, engine, demands))


def strong_train_end_lower_bound(problem: RolloutProblem, engine: EngineModel | None = None, demands=None,
                                 **limits) -> float:
    """The larger of ``train_end_lower_bound`` and CP-SAT's bound on the flow-shop relaxation
    (``flowshop_bound.chain_bound``; ``limits``: its time_limit, work_limit, threads)."""
    return max(train_end_lower_bound(problem, engine, demands), chain_bound(problem, engine, demands, **limits))
