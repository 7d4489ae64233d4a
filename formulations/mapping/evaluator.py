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
* **Energy per frame** (``energy_mj``): with ``power_model = "board"`` every power figure is
  whole-board power while that phase runs (INA260 on the Khadas), so energy = sum over phases
  of power x time (input, each unit, each transfer, output). This is how the measured
  ``total_e`` is defined, and the figure the Para-Pipe paper's tables use.
  With ``"per_pu"`` (roofline platforms) each PU's active power is charged over its busy time
  and its idle power over the rest of the period.
* **Steady-state energy per inference** (``energy_ss_mj``): what a running pipeline draws per
  inference. Every board-power figure is the static board power (``static_power_mw``: SoC on,
  nothing running) plus that phase's dynamic power. In steady state the stages run at once: the
  static power is paid once per period, and the phases' dynamic energy D = sum (P - P_static) x t
  is spread over a period in which c = (sum of phase times) / period of them run at once.
  Concurrent stages share DRAM bandwidth and the board's rails, so their dynamic powers do not
  simply add: ``concurrent_power_share`` (gamma) is the share of each further concurrent stage's
  dynamic power that shows on the board (1: they add; 0: the board draws one stage's worth):
  E_ss = P_static x period + D x (1 + gamma (c - 1)) / c. A serial chain (c = 1) gets
  ``energy_mj``. Inferences per joule = 1000 / E_ss. Without ``static_power_mw`` it equals
  ``energy_mj``; with ``"per_pu"`` power too (that model already charges every PU over the
  period).
* **Switching** (fitted on the measured layer-switching runs, pipeplan.profiles.khadas_costmodel):
  a transfer between two PUs costs the measured copy plus the pair's switch cost
  (profile.SwitchCost, growing with the tensor's size); both are CPU work, so their time and
  power scale with the DVFS level of the CPU that does it (the receiver, or the GPU's host;
  ``transfers.level_scaling``, measured by transfer_freq.csv). A unit's output goes to another
  PU once, however many of its units read it, charged at its largest edge to that PU; each
  reader waits for its own edge's transfer. A PU with a ``reentry`` factor (the NPU) that holds two or more
  segments of the frame (runs of consecutive units in the instance's order) pays, on the first
  unit of every segment, that factor times the unit's time: the NPU keeps one compiled graph
  warm, and each further graph evicts it. A one-stage plan with every unit on a PU with a
  ``whole_graph`` share runs as one compiled graph: every unit's time times that share.
"""
from __future__ import annotations

import math
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
    energy_ss_mj: float
    pu_busy_ms: dict[str, float]
    start_ms: dict[str, float] = field(default_factory=dict)   # unit -> start within its stage
    finish_ms: dict[str, float] = field(default_factory=dict)
    mode: str = "pipelined"
    phases_ms: float = 0.0    # summed time of every phase (input, units, transfers, output)
    copy_ms: dict[str, float] = field(default_factory=dict)   # receiving PU -> ms of transfers into it per frame

    def objectives(self) -> dict[str, float]:
        return {"period_ms": self.period_ms, "latency_ms": self.latency_ms, "energy_mj": self.energy_mj,
                "energy_ss_mj": self.energy_ss_mj}

    def to_dict(self, detail: bool = False) -> dict:
        d = asdict(self)
        if not math.isfinite(d["throughput_fps"]):   # a period of 0 ms (or a denormal one): no
            d["throughput_fps"] = None                # rate; JSON has no Infinity (had been printed)
        if not detail:
            for key in ("start_ms", "finish_ms", "phases_ms", "copy_ms"):
                d.pop(key)
        return d


def segment_starts(problem: MappingProblem, plan: Plan, pu: str) -> list[str]:
    """The units that start a run of consecutive units (in the instance's unit order) on ``pu``."""
    place = plan.placement()
    names = [u.name for u in problem.units]
    return [u for i, u in enumerate(names) if place[u][1] == pu and (i == 0 or place[names[i - 1]][1] != pu)]


def whole_graph_pu(problem: MappingProblem, plan: Plan) -> str | None:
    """The PU that runs the whole network as one compiled graph in ``plan``, if any: a one-stage
    plan with every unit on a PU that has a ``whole_graph`` share."""
    pus = {pu for _, pu in plan.placement().values()}
    if len(plan.stages) == 1 and len(pus) == 1:
        pu = next(iter(pus))
        return pu if pu in problem.profile.whole_graph else None
    return None


def time_factors(problem: MappingProblem, plan: Plan, evicted: frozenset[str] = frozenset()) -> dict[str, float]:
    """unit -> factor on its profiled time, for the effects a per-unit profile cannot hold:
    the whole network as one compiled graph (``Profile.whole_graph``), and the cold first unit
    of every segment on a PU that holds two or more segments in the frame (``Profile.reentry``).

    ``evicted``: re-entry PUs that other networks use too (the joint model, formulations/mapping/
    multi): each frame finds another network's graph loaded there, so the first unit of every
    segment is cold even when the PU holds one segment of this network (a whole-graph plan
    pays it on its first unit, on top of its share)."""
    prof = problem.profile
    out: dict[str, float] = {}
    pu = whole_graph_pu(problem, plan)
    if pu is not None:
        out = {u.name: prof.whole_graph[pu] for u in problem.units}
        if pu in evicted and pu in prof.reentry:
            first = problem.units[0].name
            out[first] *= 1.0 + prof.reentry[pu]
        return out
    for pu, extra in prof.reentry.items():
        starts = segment_starts(problem, plan, pu) if pu in prof.pus else []
        if len(starts) >= 2 or (starts and pu in evicted):
            out.update({u: 1.0 + extra for u in starts})
    return out


def evaluate(problem: MappingProblem, plan: Plan, *, check: bool = True,
             evicted: frozenset[str] = frozenset()) -> Evaluation:
    """Score ``plan``; raises :class:`InfeasiblePlan` listing every broken rule. ``evicted``:
    see :func:`time_factors` (empty for a network alone on the SoC)."""
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

    factor = time_factors(problem, plan, evicted)

    def unit_time(u: str) -> float:
        t = prof.time(idx[u], place[u][1], level[u])
        return t * factor[u] if u in factor else t

    edge_bytes = {(e.src, e.dst): e.bytes for e in problem.edges}
    # a unit's output is handed to another PU once, charged at its largest edge to that PU (as
    # the exact models charge it): the first edge met had been charged, so the energy hung on
    # the order of the units and the models proved optima the evaluator beat
    sent: dict[tuple[str, str], list] = {}
    for e in problem.edges:
        sent.setdefault((e.src, place[e.dst][1]), []).append(e.bytes)
    handoff_bytes = {k: max((b for b in v if b is not None), default=None) for k, v in sent.items()}
    energy_uj = 0.0   # mW x ms
    phases_ms = 0.0   # summed time of every phase (input, units, transfers, output)
    handoffs: set[tuple[str, str]] = set()  # (unit, destination PU): a tensor is sent once per PU
    copy: dict[str, float] = {}
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
                    xfer = prof.transfers.time_ms(e.src, src_pu, pu, edge_bytes[(e.src, e.dst)], level[u])
                    if xfer and (e.src, pu) not in handoffs:
                        handoffs.add((e.src, pu))
                        sent_ms = prof.transfers.time_ms(e.src, src_pu, pu, handoff_bytes[(e.src, pu)], level[u])
                        copy[pu] = copy.get(pu, 0.0) + sent_ms
                        energy_uj += sent_ms * prof.transfers.power_mw * prof.transfers.scaling(src_pu, pu, level[u])[1]
                        phases_ms += sent_ms
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
                phases_ms += t
                heads[pu] += 1
                remaining -= 1
                progressed = True
            if not progressed:  # only reachable with check=False on a deadlocking order
                raise InfeasiblePlan([f"stage {s}: per-PU orders deadlock"])
        makespan = max((finish[u] for u in members), default=origin)
        if out_phase and place[last][0] == s:
            makespan = max(makespan, finish[last] + out_phase.time_ms)
        stage_times.append(makespan)

    for phase in (in_phase, out_phase):
        if phase:
            energy_uj += phase.time_ms * phase.power_mw
            phases_ms += phase.time_ms
    latency = sum(stage_times)
    if plan.mode == "serial":
        period = latency
    else:
        period = max(max(stage_times), max(busy.values()))
    if prof.power_model == "per_pu":
        energy_uj += sum(p.idle_power_mw * max(0.0, period - busy[p.name]) for p in prof.pus.values())
    steady_uj = energy_uj
    if prof.power_model == "board" and prof.static_power_mw is not None and prof.has_power and period > 0:
        dynamic = energy_uj - prof.static_power_mw * phases_ms
        overlap = max(1.0, phases_ms / period)
        steady_uj = (prof.static_power_mw * period
                     + dynamic * (1 + prof.concurrent_power_share * (overlap - 1)) / overlap)
    return Evaluation(period_ms=period, latency_ms=latency, energy_mj=energy_uj / 1000.0,
                      energy_ss_mj=steady_uj / 1000.0,
                      throughput_fps=1000.0 / period if period > 0 else float("inf"),
                      stage_times_ms=stage_times, pu_busy_ms={p: b for p, b in busy.items() if b > 0},
                      start_ms=start, finish_ms=finish, mode=plan.mode, phases_ms=phases_ms,
                      copy_ms=copy)
