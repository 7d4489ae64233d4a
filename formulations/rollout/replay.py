"""Re-score a plan by replaying it in the simulator: the plan's admissions are offered to the
engine in order, each at its planned time (or at the first decision after it), and the trainer
runs as the plan says. Replaying a simulated policy's own plan reproduces its schedule;
replaying an offline plan gives its real figures under the engine. A request the engine
retracts and the plan does not re-admit is offered again first, at the next decision."""
from __future__ import annotations

from typing import Any

from pipeplan.core.errors import InputError
from pipeplan.formulations.rollout.problem import RolloutProblem
from pipeplan.formulations.rollout.schedule import PLAN_SCHEMA, Schedule
from pipeplan.formulations.rollout.simulator import EPS, WAITING, Policy, simulate
from pipeplan.formulations.rollout.trainer import MODES

TOLERANCE_S = 1e-6  # a planned admission this close to a decision happens at that decision


class ReplayPolicy(Policy):
    name = "replay"

    def __init__(self, admissions: list[tuple[int, float]], updates: list[list[int]], trainer: str):
        self.events = [(int(i), float(t)) for i, t in admissions]
        self.updates = updates
        self.trainer = trainer

    def reset(self, problem):
        super().reset(problem)
        seen: dict[int, int] = {}
        self.nth = []                      # event j is the nth[j]-th admission of its request
        for i, _ in self.events:
            seen[i] = seen.get(i, 0) + 1
            self.nth.append(seen[i])
        self.planned = seen
        self.cursor = 0
        self.orphans: list[int] = []

    def on_retract(self, i, t):
        self.orphans.append(i)

    def _pending(self, state):
        ev, nth, adm = self.events, self.nth, state.admissions
        while self.cursor < len(ev) and adm[ev[self.cursor][0]] >= nth[self.cursor]:
            self.cursor += 1
        return self.cursor

    def decide(self, state):
        for i in self.orphans:
            if state.status[i] == WAITING and state.admissions[i] >= self.planned.get(i, 0):
                yield i
        self.orphans = [i for i in self.orphans if state.status[i] == WAITING]
        for j in range(self._pending(state), len(self.events)):
            i, t = self.events[j]
            if t > state.t + TOLERANCE_S:
                return
            if state.admissions[i] == self.nth[j] - 1:
                yield i

    def next_wakeup(self, state):
        j = self._pending(state)
        if j == len(self.events):
            return None
        t = self.events[j][1]
        return t if t > state.last_decision_s + TOLERANCE_S + EPS else None

    def planned_updates(self):
        return self.updates


def check_plan(problem: RolloutProblem, plan: Any, source: str = "plan") -> None:
    if not isinstance(plan, dict) or plan.get("schema") != PLAN_SCHEMA:
        raise InputError(source, "schema", f"expected a {PLAN_SCHEMA!r} plan")
    adm, updates = plan.get("admissions"), plan.get("updates")
    n = problem.n_requests
    if not isinstance(adm, list) or not all(isinstance(a, (list, tuple)) and len(a) == 2 for a in adm):
        raise InputError(source, "admissions", "expected a list of [request, time] pairs")
    for j, (i, t) in enumerate(adm):
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n:
            raise InputError(source, f"admissions[{j}]", f"unknown request {i!r} (0..{n - 1})")
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not t >= 0:
            raise InputError(source, f"admissions[{j}]", f"expected a non-negative time, got {t!r}")
    if {i for i, _ in adm} != set(range(n)):
        raise InputError(source, "admissions", f"must admit every request 0..{n - 1}")
    if not isinstance(updates, list) or sorted(g for u in updates for g in u) != list(range(problem.R)):
        raise InputError(source, "updates", f"must cover every group 0..{problem.R - 1} once")
    if [len(u) for u in updates] != problem.update_sizes():
        raise InputError(source, "updates", f"update sizes must be {problem.update_sizes()}")
    if plan.get("trainer", "planned") not in MODES:
        raise InputError(source, "trainer", f"expected one of {', '.join(MODES)}")
    if problem.rounds > 1 and plan.get("trainer", "planned") == "planned":
        raise InputError(source, "trainer", "a plan of several rounds replays with a stream or sync trainer")
    staleness = plan.get("staleness", 0)
    if isinstance(staleness, bool) or not isinstance(staleness, int) or staleness < 0:
        raise InputError(source, "staleness", f"expected a whole number >= 0, got {staleness!r}")


def replay(problem: RolloutProblem, plan: dict[str, Any], *, trainer: str | None = None) -> Schedule:
    """The schedule the simulator gives ``plan``. The trainer runs as the plan says (its
    ``trainer`` mode: ``planned`` runs the plan's updates, ``sync``/``stream`` rebuild them);
    ``trainer=`` overrides it, e.g. ``stream`` to consume groups in completion order."""
    check_plan(problem, plan)
    policy = ReplayPolicy(plan["admissions"], plan["updates"], trainer or plan.get("trainer", "planned"))
    policy.staleness = plan.get("staleness", 0)
    schedule = simulate(problem, policy)
    schedule.policy = plan.get("policy") or "replay"
    return schedule
