"""Offline plans by group finish steps: every request admitted just in time.

A plan here is a finish step F_g per group (decode steps the engine has run when g completes);
request i of g is admitted at step F_g - n_i and runs to F_g. This is the schedule family that
meets the step-indexed bound's forced work exactly (``step_bound``): nothing runs earlier than
it must, so the steps stay cheap, while F spreads the groups' completions to feed the trainer.

``StepTimeline`` gives such a plan's exact engine time on one engine (steps ``c0 + c1 b + c2
kv``, prefills stalling the decode) with numpy difference arrays, and the train end with the
trainer taking groups in completion order. Simulated annealing moves finish steps (one group,
two groups, or every group from some step on); it is deterministic for a seed and a number of
evaluations. The best plan is replayed in the
simulator, whose figures stand (KV admission checks may delay an admission; the replay says).

Known response lengths: an oracle, like CP-SAT's offline model.
"""
from __future__ import annotations

import numpy as np

from pipeplan.core.deadline import Deadline
from pipeplan.core.errors import InputError
from pipeplan.core.registry import register
from pipeplan.core.result import Termination
from pipeplan.formulations.rollout.flowshop_bound import johnson_order
from pipeplan.formulations.rollout.problem import RolloutProblem
from pipeplan.formulations.rollout.replay import replay
from pipeplan.formulations.rollout.schedule import PLAN_SCHEMA
from pipeplan.formulations.rollout.trainer import chunks
from pipeplan.solvers.rollout.common import scored_result
from pipeplan.solvers.rollout.step_bound import step_bound

EVALUATIONS = 3_000     # annealing moves tried from each start by default (about 0.3 ms each at R = 32)
LARGEST_MOVE = 10       # moves shift finish steps by +-2**0 .. 2**LARGEST_MOVE steps
TEMPERATURE = 0.005     # annealing's first temperature, relative to the train end (best of 0.002-0.01 on lsat-ar R = 32)


class StepTimeline:
    """Exact times of just-in-time plans on one engine (module docstring)."""

    def __init__(self, problem: RolloutProblem):
        e = problem.engine
        self.problem = problem
        self.lengths = np.array(problem.lengths, dtype=np.int64)
        self.prompts = np.array(problem.prompts, dtype=float)
        self.group = np.arange(problem.n_requests) // problem.K
        self.prefill = np.array([e.prefill_time(int(p)) for p in problem.prompts])
        self.longest = np.array([max(r) if r else 0 for r in problem.response_tokens], dtype=np.int64)
        self.tokens = np.array(problem.group_tokens, dtype=np.int64)
        self.sizes = problem.update_sizes()

    def step_times(self, finish: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(T, start): T[s] is the time when s decode steps have run, start[i] request i's
        admission step. Steps nobody runs in cost nothing (the engine waits)."""
        e = self.problem.engine
        end = finish[self.group]
        start = end - self.lengths
        size = int(finish.max()) + 1
        running = np.cumsum(np.bincount(start, minlength=size) - np.bincount(end, minlength=size))[:-1]
        # KV in use at step s: sum over running requests of prompt + (s - start)
        base = np.cumsum(np.bincount(start, self.prompts - start, minlength=size)
                         - np.bincount(end, self.prompts - start, minlength=size))[:-1]
        kv = base + np.arange(size - 1) * running
        cost = np.where(running > 0, e.c0_s + e.c1_s * running + e.c2_s * kv, 0.0)
        cost += np.bincount(start, self.prefill, minlength=size)[:-1]
        return np.concatenate(([0.0], np.cumsum(cost))), start

    def train_end(self, finish: np.ndarray) -> float:
        t, _ = self.step_times(finish)
        done = t[finish]
        order = np.argsort(done, kind="stable")
        tr, end, k = self.problem.trainer, 0.0, 0
        for n in self.sizes:
            batch = order[k:k + n]
            k += n
            end = max(end, done[batch].max()) + tr.update_time(int(self.tokens[batch].sum()))
        return end

    def plan(self, finish: np.ndarray) -> dict:
        t, start = self.step_times(finish)
        order = [int(g) for g in np.argsort(t[finish], kind="stable")]
        admissions = sorted(((int(i), float(t[s])) for i, s in enumerate(start)), key=lambda a: (a[1], a[0]))
        return {"schema": PLAN_SCHEMA, "policy": "step-plan", "admissions": admissions,
                "updates": chunks(order, self.sizes), "trainer": "stream"}


def seeds(problem: RolloutProblem, timeline: StepTimeline) -> dict[str, np.ndarray]:
    """Starting plans: every group as early as it can finish, and the groups finishing one
    after another in Johnson's flow-shop order, about (mean longest response) / R steps apart
    (each no earlier than its own longest response)."""
    asap = timeline.longest.copy()
    spaced = asap.copy()
    step = int(np.mean(timeline.longest) / max(1, problem.R // max(timeline.sizes)))   # per update
    prev = 0
    for g in johnson_order(problem):
        prev = spaced[g] = max(asap[g], prev + step // max(timeline.sizes))
    return {"asap": asap, "johnson-spaced": spaced}


def anneal(timeline: StepTimeline, finish: np.ndarray, evaluations: int, rng: np.random.Generator,
                 deadline: Deadline) -> tuple[float, np.ndarray, int]:
    """Simulated annealing over finish steps: (best train end, its finish steps, evaluations
    made). A worse move is kept with probability exp(-loss / T), T falling linearly from
    ``TEMPERATURE`` x the current train end to 0."""
    current = best = timeline.train_end(finish)
    best_finish = finish
    lo, R = timeline.longest, finish.size
    done = 0
    while done < evaluations and not deadline.expired():
        trial = finish.copy()
        shift = int(rng.choice((-1, 1)) * 2 ** rng.integers(0, LARGEST_MOVE + 1))
        kind = rng.random()
        g = rng.integers(R)
        if kind < 0.6:
            trial[g] += shift
        elif kind < 0.85:
            trial[[g, rng.integers(R)]] += shift
        else:
            trial[trial >= trial[g]] += shift
        np.maximum(trial, lo, out=trial)
        value = timeline.train_end(trial)
        temperature = TEMPERATURE * current * (1 - done / evaluations)
        done += 1
        if value <= current or (temperature > 0 and rng.random() < np.exp((current - value) / temperature)):
            finish, current = trial, value
            if value < best:
                best, best_finish = value, trial
    return best, best_finish, done


@register("rollout", "step-plan",
          description="offline: group finish steps, requests admitted just in time; simulated annealing on the exact "
                      "engine timeline, replayed (known lengths)")
def solve_step_plan(problem, *, evaluations: int = EVALUATIONS, seed: int = 0, time_limit=None,
                    prove_s: float = 0.0, threads: int = 1):
    """``evaluations`` annealing moves from each seed plan (deterministic for ``seed``;
    ``time_limit`` is the safety net). ``prove_s`` > 0 also runs the step-indexed bound for
    that many seconds (HiGHS, ``threads``) and reports it when it beats the analytic one."""
    if problem.rounds != 1 or not problem.engine.single:
        field = "rounds" if problem.rounds != 1 else "engine"
        raise InputError(problem.name, field, "step-plan plans one round on one engine without shared prefixes")
    if isinstance(evaluations, bool) or not isinstance(evaluations, int) or evaluations < 0:
        raise InputError(problem.name, "evaluations", f"expected a whole number >= 0, got {evaluations!r}")
    clock = Deadline(time_limit)
    timeline = StepTimeline(problem)
    rng = np.random.default_rng(seed)
    found = []
    for name, start in seeds(problem, timeline).items():
        value, finish, done = anneal(timeline, start, evaluations, rng, clock)
        found.append((value, name, finish, done))
    value, name, finish, _ = min(found, key=lambda f: (f[0], f[1]))
    schedule = replay(problem, timeline.plan(finish))
    schedule.policy = "step-plan"
    replayed = schedule.metrics()["train_end_s"]
    params = {"evaluations": evaluations, "seed": seed, "start": name, "planned_train_end_s": value,
              "evaluations_done": sum(f[3] for f in found)}
    bound = None
    if prove_s > 0 and not clock.expired():
        left = clock.remaining(floor=0.05)
        proof = step_bound(problem, time_limit=prove_s if left is None else min(prove_s, left), threads=threads,
                           upper=min(value, replayed))
        bound = proof.bound_s
        params.update(step_bound_s=proof.bound_s, step_bound_closed=proof.closed, step_bound_width=proof.width)
    cut = clock.expired()
    message = (f"best of {len(found)} starts ({name}): planned {value:.3f} s, replayed {replayed:.3f} s"
               + (f"; step-indexed bound {bound:.3f} s" if bound is not None else ""))
    return scored_result(problem, "step-plan", schedule, bound=bound, params=params, message=message,
                         termination=Termination.TIME_LIMIT if cut else Termination.COMPLETED,
                         stopped_by="time" if cut else None)
