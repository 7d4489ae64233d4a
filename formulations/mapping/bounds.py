"""Lower bounds on period and latency, for gaps of heuristic and time-limited runs.

* period >= the largest unit on its fastest PU; >= all work on fastest PUs / number of PUs;
  >= input stage + first unit (the first stage holds both), each on its best PU.
* latency >= the critical path with every unit on its fastest PU, plus the cheapest input and
  output stages (transfers counted as 0).
Every bound uses each PU's top DVFS level, the fastest a unit can run.
"""
from __future__ import annotations

from pipeplan.formulations.mapping.problem import MappingProblem


def fastest_times(problem: MappingProblem) -> list[float]:
    prof = problem.profile
    out = []
    for i in range(len(problem.units)):
        times = [prof.time(i, p.name, p.max_level) for p in prof.pus.values()]
        out.append(min(t for t in times if t is not None))
    return out


def _phase_min(table, pus) -> float:
    values = [ph.time_ms for p in pus for ph in table.get(p, {}).values()]
    return min(values) if values else 0.0


def lower_bounds(problem: MappingProblem) -> dict[str, float]:
    prof = problem.profile
    fast = fastest_times(problem)
    pus = list(prof.pus)
    t_in = _phase_min(prof.input_stage, pus)
    t_out = _phase_min(prof.output_stage, pus)
    first = min(((ph.time_ms + (prof.time(0, p, lv) or float("inf")))
                 for p, by in prof.input_stage.items() for lv, ph in by.items()), default=fast[0])
    period = max(max(fast), sum(fast) / len(pus), first)
    finish: dict[str, float] = {}
    for i, u in enumerate(problem.units):
        start = max((finish[e.src] for e in problem.preds[u.name]), default=0.0)
        finish[u.name] = start + fast[i]
    latency = t_in + max(finish.values()) + t_out
    return {"period_ms": period, "latency_ms": latency}
