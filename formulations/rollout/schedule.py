"""What the simulator outputs for one round, the metrics derived from it, and the plan (the
decisions alone: when each request was admitted, which groups each update took) that lets
the simulator replay and re-score any schedule."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PLAN_SCHEMA = "pipeplan.rollout-plan/1"


@dataclass(frozen=True)
class Update:
    """One trainer update: the groups it consumed, their tokens, and when it ran."""

    groups: tuple[int, ...]
    tokens: int
    start_s: float
    end_s: float


@dataclass
class Schedule:
    """Every request's (first) admit and finish time, every admission in order and every stay
    in the running batch (``segments``: a retracted request has several), every group's
    completion, every update, the weight version of each request's first stay, and when new
    weights were published (``publishes``: one (start, end) per round; ``publish_*_s`` the
    last). ``staleness``: the policy's bound on how far a request's weights may lag its round."""

    admit_s: list[float]
    finish_s: list[float]
    admissions: list[tuple[int, float]]
    segments: list[Any]
    group_complete_s: list[float]
    updates: list[Update]
    weight_version: list[int]
    publish_start_s: float
    publish_end_s: float
    trainer_mode: str
    policy: str = ""
    decisions: int = 0
    retractions: int = 0
    publishes: list[tuple[float, float]] = field(default_factory=list)
    staleness: int = 0

    def metrics(self) -> dict[str, float]:
        """Rollout-to-train-end time (from the start of the round to the end of the last
        update), trainer waiting ratio = wait / (wait + compute) over that span, first-dispatch
        time (start of the first update), rollout makespan, and the trainer's compute and wait."""
        end = self.updates[-1].end_s
        compute = sum(u.end_s - u.start_s for u in self.updates)
        wait = max(0.0, end - compute)
        out = {"train_end_s": end, "waiting_ratio": wait / end if end > 0 else 0.0,
               "first_dispatch_s": self.updates[0].start_s, "rollout_makespan_s": max(self.finish_s),
               "trainer_compute_s": compute, "trainer_wait_s": wait,
               "publish_end_s": self.publish_end_s, "retractions": self.retractions}
        if len(self.publishes) > 1:          # several rounds: throughput and staleness
            per = len(self.finish_s) // len(self.publishes)
            lag = [i // per - v for i, v in enumerate(self.weight_version)]
            out.update(samples_per_s=len(self.finish_s) / self.publish_end_s if self.publish_end_s > 0 else 0.0,
                       mean_staleness=sum(lag) / len(lag), max_staleness=max(lag))
        return out

    def plan(self) -> dict[str, Any]:
        """The decisions: admissions, updates, and how the trainer runs (the planned updates for
        one round; with several rounds the trainer's own rule, ``stream`` or ``sync``, rebuilds
        them) and the staleness bound the run kept."""
        several = len(self.publishes) > 1
        trainer = "sync" if self.trainer_mode == "sync" else ("stream" if several else "planned")
        return {"schema": PLAN_SCHEMA, "policy": self.policy,
                "admissions": [[i, t] for i, t in self.admissions], "updates": [list(u.groups) for u in self.updates],
                "trainer": trainer, "staleness": self.staleness}

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "trainer_mode": self.trainer_mode, "metrics": self.metrics(),
                "requests": [{"id": i, "admit_s": a, "finish_s": f, "weight_version": v}
                             for i, (a, f, v) in enumerate(zip(self.admit_s, self.finish_s, self.weight_version))],
                "groups": [{"id": g, "complete_s": c} for g, c in enumerate(self.group_complete_s)],
                "segments": [{"request": x.request, "admit_s": x.admit_s, "end_s": x.end_s,
                              "generated_before": x.generated_before, "finished": x.finished,
                              "replica": x.replica, "version": x.version} for x in self.segments],
                "updates": [{"groups": list(u.groups), "tokens": u.tokens, "start_s": u.start_s, "end_s": u.end_s}
                            for u in self.updates],
                "publish": {"start_s": self.publish_start_s, "end_s": self.publish_end_s},
                "publishes": [list(x) for x in self.publishes], "staleness": self.staleness,
                "decisions": self.decisions}
