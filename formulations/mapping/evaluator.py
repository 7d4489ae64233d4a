"""The one cost model of the mapping problem: period, latency and energy of a plan.

Rules, fitted to the whole-network measurements of the Khadas VIM3 board
(instances/khadas-vim3/evaluations.csv; see tests/mapping/test_khadas_fit.py for the fit):

* **Stage time** is the makespan of the stage's schedule for one frame. Units start when their
  PU is free (per-PU order from the plan) and their inputs are there. An input coming from an
  earlier stage is handed over at the start of the stage and is charged to the *receiving*
  stage: it is ready after its transfer time. An input from the same stage on another PU is
  ready when its producer ends plus the transfer time.
* **Input stage** (image load and pre-processing, measured per PU of the first unit): charged
  to the stage holding the first unit, before its source units start. **Output stage** (read
  back the result): charged to the stage holding the last unit, after that unit ends.
  On the board this is what the measurements show: GoogLeNet GGGGBBBBBBG measured a 58.0 ms
  period, and input (12.4 ms) + blocks 0-3 on the GPU (45.7 ms) = 58.1 ms is that first stage.
* **Period** (pipelined) = max(every stage time, every PU's busy time per frame): a PU that
  serves two stages (GPU in GGGGBBBBBBG) must fit the work of both into one period.
  **Serial** mode runs one frame at a time: period = latency.
* **Latency** = sum of the stage times (one frame passes every stage once).
* **Energy per frame**: with ``power_model = "board"`` every power figure is whole-board power
  while that phase runs (INA260 on the Khadas), so energy = sum over phases of power x time
  (input, each unit, each transfer, output). This is how the measured ``total_e`` is defined.
  With ``"per_pu"`` (roofline platforms) each PU's active power is charged over its busy time
  and its idle power over the rest of the period.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from pipeplan.formulations.mapping.checker import violations
from pipeplan.formulations.mapping.plan import Plan
from pipeplan.formulations.mapping.problem import MappingProblem


class InfeasiblePlan(ValueError):
    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else ""))


@dataclass
class Evaluation:
    period_ms: float
    latency_ms: float
    energy_mj: float
    throughput_fps: float
    stage_times_ms: list[float]
    pu_busy_ms: dict[str, float]
    start_ms: dict[str, float] = field(default_factory=dict)   # unit -> start within its stage
    finish_ms: dict[str, float] = field(default_factory=dict)
    mode: str = "pipelined"

    def objectives(self) -> dict[str, float]:
        return {"period_ms": self.period_ms, "latency_ms": self.latency_ms, "energy_mj": self.energy_mj}

    def to_dict(self, detail: bool = False) -> dict:
        d = asdict(self)
        if not detail:
            d.pop("start_ms")
            d.pop("finish_ms")
        return d


def evaluate(problem: MappingProblem, plan: Plan, *, check: bool = True) -> Evaluation:
    """Score ``plan``; raises :class:`InfeasiblePlan` listing every broken rule."""
    if check:
        bad = violations(problem, plan)
        if bad:
            raise InfeasiblePlan(bad)
    prof = problem.profile
    idx = problem.index
    place = plan.placement()
    level = {u: prof.level(pu, plan.levels.get(u, "max")) for u, (_, pu) in place.items()}
    first, last = problem.units[0].name, problem.units[-1].name
    in_pu, out_pu = place[first][1], place[last][1]
    in_phase = prof.input_stage.get(in_pu, {}).get(level[first])
    out_phase = prof.output_stage.get(out_pu, {}).get(level[last])

    def unit_time(u: str) -> float:
        return prof.time(idx[u], place[u][1], level[u])

    edge_bytes = {(e.src, e.dst): e.bytes for e in problem.edges}
    energy_uj = 0.0   # mW x ms
    handoffs: set[tuple[str, str]] = set()  # (unit, destination PU): a tensor is sent once per PU
    start: dict[str, float] = {}
    finish: dict[str, float] = {}
    stage_times: list[float] = []
    busy = {p: 0.0 for p in prof.pus}

    for s, stage in enumerate(plan.stages):
        origin = in_phase.time_ms if (in_phase and place[first][0] == s) else 0.0
        pu_free = {pu: origin for pu in stage.pus}
        heads = {pu: 0 for pu in stage.order}
        members = set(stage.units)
        remaining = len(members)
        while remaining:
            progressed = False
            for pu, units in stage.order.items():
                if heads[pu] >= len(units):
                    continue
                u = units[heads[pu]]
                ready = origin if not problem.preds[u] else 0.0
                blocked = False
                for e in problem.preds[u]:
                    src_stage, src_pu = place[e.src]
                    xfer = prof.transfers.time_ms(e.src, src_pu, pu, edge_bytes[(e.src, e.dst)])
                    if xfer and (e.src, pu) not in handoffs:
                        handoffs.add((e.src, pu))
                        energy_uj += xfer * prof.transfers.power_mw
                    if src_stage < s:
                        ready = max(ready, xfer)
                    elif e.src in finish and e.src in members:
                        ready = max(ready, finish[e.src] + xfer)
                    else:
                        blocked = True
                        break
                if blocked:
                    continue
                t = unit_time(u)
                start[u] = max(ready, pu_free[pu])
                finish[u] = start[u] + t
                pu_free[pu] = finish[u]
                busy[pu] += t
                energy_uj += t * prof.power(idx[u], pu, level[u])
                heads[pu] += 1
                remaining -= 1
                progressed = True
            if not progressed:  # only reachable with check=False on a deadlocking order
                raise InfeasiblePlan([f"stage {s}: per-PU orders deadlock"])
        makespan = max((finish[u] for u in members), default=origin)
        if out_phase and place[last][0] == s:
            makespan = max(makespan, finish[last] + out_phase.time_ms)
        stage_times.append(makespan)

    if in_phase:
        energy_uj += in_phase.time_ms * in_phase.power_mw
    if out_phase:
        energy_uj += out_phase.time_ms * out_phase.power_mw
    latency = sum(stage_times)
    if plan.mode == "serial":
        period = latency
    else:
        period = max(max(stage_times), max(busy.values()))
    if prof.power_model == "per_pu":
        energy_uj += sum(p.idle_power_mw * max(0.0, period - busy[p.name]) for p in prof.pus.values())
    return Evaluation(period_ms=period, latency_ms=latency, energy_mj=energy_uj / 1000.0,
                      throughput_fps=1000.0 / period if period > 0 else float("inf"),
                      stage_times_ms=stage_times, pu_busy_ms={p: b for p, b in busy.items() if b > 0},
                      start_ms=start, finish_ms=finish, mode=plan.mode)
