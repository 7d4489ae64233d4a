"""The Khadas VIM3 cost model's parameters beyond the per-block profiles, fitted on measured runs.

The per-block profiles say what each block costs on each PU and what copying a block's output
from one PU to another costs. Measured mappings that switch component many times (150 random
layer-switching runs of YOLOv3, the MobileV1 runs with NPU segments) take longer than that; a
whole network on the NPU takes far less. Three effects, each a physical rule with one
parameter (evaluator.py applies them; results/costmodel/ has the cross-validation):

* **A switch between a CPU and the GPU, or between the two CPU clusters**, costs on top of the
  measured copy ``k_class x size``: mapping/unmapping and cache maintenance of the tensor, or a
  cold cache after the thread migration. A block's size measure (``size_ms``) is the measured
  time to read its output back from the GPU (``transfers.csv``, G->B), a stand-in for its
  bytes; where a network has no per-block transfer, the median G->B time over all networks.
  Switches to or from the NPU cost nothing extra: the NPU blocks' profiled times already hold
  their tensor fill and read-back (a single NPU segment lands on the per-block sum; MobileV1
  BBNNNNNNNNNNNN measured 70.5 ms against 68.4 ms predicted without any switch cost).
* **NPU re-entry** (``reentry``): when a frame holds two or more NPU segments, the first block
  of each runs ``reentry`` times its own time longer: the NPU keeps one compiled graph warm,
  and each further graph evicts it. One segment pays nothing.
* **The whole network as one NPU graph** (``whole_graph``): when every block runs on the NPU,
  the runtime compiles one graph, which takes that share of the blocks' summed times (no fill
  and read-back between blocks). Only MobileV1 has both per-block NPU times and whole-network
  NPU runs, so this share rests on one network (its runs at several frequencies).

The first three parameters are fitted together by non-negative least squares on the measured
latency of every run that switches, in relative error (latency is linear in them); a run
without switches does not move them. Why these and not others: a fixed cost per switch, or an
NPU switch cost by tensor size, fits the YOLOv3 runs as well but carries over to no other
network (MobileV1's NPU switches then cost ~30 ms where they measure ~2; leave-one-network-out
error 25-43%), while this model predicts each network from the others' runs within a few
percent (``cross_validation``).

Steady-state energy (evaluator.py) has two parameters: the static board power, taken as the
lowest board power ever measured with something running (an upper bound of it, not fitted),
and ``concurrent_power_share``, fitted on the pipelined runs' measured board power while the
pipeline runs (energy per inference is that power x the period).

Errors are reported cross-validated (k-fold over runs, leave one network out) by
:func:`cross_validation`. Source of every number: the Khadas VIM3 measurements of public
repository Ehsan-aghapour/CO-UP-Profiling at commit 22005a9d8742a71fb9e03e6e1484359984084a12.
"""
from __future__ import annotations

import csv
import dataclasses
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from pipeplan.formulations.mapping.evaluator import evaluate, segment_starts
from pipeplan.formulations.mapping.frequencies import plan_for
from pipeplan.formulations.mapping.problem import Edge, MappingProblem, Unit
from pipeplan.formulations.mapping.profile import Profile, SwitchCost, profile_from_dict

CLASSES = ("GPU", "CPU")     # switch classes with a cost: CPU<->GPU, CPU<->CPU
PARAMS = (*CLASSES, "reentry")
NPU = "N"


def switch_class(src_kind: str, dst_kind: str) -> str | None:
    """The class of a switch between PUs of these kinds (profile PU ``kind``), None for one
    that touches the NPU (no extra cost)."""
    kinds = {src_kind, dst_kind}
    return None if "npu" in kinds else "GPU" if "gpu" in kinds else "CPU"
SIZE_PAIR = "G->B"      # the transfer whose measured time is a block's size measure


@dataclass(frozen=True)
class Run:
    """One measured run in pipeplan's terms."""

    network: str            # profile / instance name under khadas-vim3/
    mapping: str
    mode: str
    freq: str
    latency_ms: float
    period_ms: float | None
    energy_mj: float | None
    power_mw: float | None  # board power while the run's blocks execute (task_power)
    source: str

    @property
    def label(self) -> str:
        return f"{self.network}:{self.mapping}:{self.mode}:{self.freq}"

    @property
    def switches(self) -> int:
        return sum(a != b for a, b in zip(self.mapping, self.mapping[1:]))

    @property
    def steady_mj(self) -> float | None:
        """Measured energy per inference of a running pipeline: board power x measured period."""
        if self.mode != "pipelined" or self.power_mw is None or self.period_ms is None:
            return None
        return self.power_mw * self.period_ms / 1000.0


def _number(cell: str) -> float | None:
    return float(cell) if cell not in ("", None) else None


def read_runs(path: Path) -> list[Run]:
    """Runs of a derived CSV (evaluations.csv or switching_runs.csv, written by khadas_import)."""
    with path.open() as fh:
        rows = csv.DictReader(line for line in fh if not line.startswith("#"))
        return [Run(r["instance"].split("/")[-1], r["mapping"], r["mode"], r["freq"],
                    float(r["measured_latency_ms"]), _number(r.get("measured_period_ms", "")),
                    _number(r.get("measured_energy_mj", "")), _number(r.get("measured_power_mw", "")),
                    r["source_file"]) for r in rows]


def bare(profile: Profile) -> Profile:
    """The profile without the fitted parameters (what they are fitted against)."""
    return dataclasses.replace(profile, static_power_mw=None, concurrent_power_share=1.0, reentry={},
                               whole_graph={},
                               transfers=dataclasses.replace(profile.transfers, switch={}, size_ms={}))


def chain_problem(profile: Profile) -> MappingProblem:
    """The block chain of a Khadas profile (the instances' graph)."""
    units = tuple(Unit(u) for u in profile.units)
    edges = tuple(Edge(a, b) for a, b in zip(profile.units, profile.units[1:]))
    return MappingProblem(name=profile.name, units=units, edges=edges, profile=profile)


def size_measures(profile: Profile, fallback_ms: float) -> dict[str, float]:
    """unit -> measured G->B time of its output, or ``fallback_ms`` where not measured."""
    tr = profile.transfers
    return {u: tr.measured.get(u, {}).get(SIZE_PAIR, fallback_ms) for u in profile.units}


def median_size_ms(profiles: list[Profile]) -> float:
    values = [v for p in profiles for by in p.transfers.measured.values() for k, v in by.items() if k == SIZE_PAIR]
    return statistics.median(values) if values else 0.0


def with_parameters(profile: Profile, params: "Parameters", network: str) -> Profile:
    kinds = {p: pu.kind for p, pu in profile.pus.items()}
    per_pair = {}
    for a in kinds:
        for b in kinds:
            cls = switch_class(kinds[a], kinds[b]) if a != b else None
            if cls in params.switch:
                per_pair[f"{a}->{b}"] = params.switch[cls]
    tr = dataclasses.replace(profile.transfers, switch=per_pair, size_ms=params.size_ms[network])
    npu = NPU in profile.pus
    return dataclasses.replace(profile, transfers=tr, static_power_mw=params.static_power_mw,
                               concurrent_power_share=params.concurrent_power_share,
                               reentry={NPU: params.reentry} if npu and params.reentry else {},
                               whole_graph={NPU: params.whole_graph} if npu and params.whole_graph else {})


@dataclass(frozen=True)
class Sample:
    """A run scored by the bare profile, with what each parameter multiplies in its latency."""

    run: Run
    base_latency_ms: float
    features: np.ndarray          # per PARAMS entry

    @property
    def switches(self) -> bool:
        return bool(self.features.any())


def sample(run: Run, problem: MappingProblem, size_ms: dict[str, float]) -> Sample | None:
    """None when the profile cannot express the run (a PU without per-block measurements)."""
    try:
        plan = plan_for(problem, run.mapping, run.mode, run.freq, source=run.source)
        ev = evaluate(problem, plan)
    except (ValueError, KeyError):
        return None
    prof = problem.profile
    kinds = {p: pu.kind for p, pu in prof.pus.items()}
    place = plan.placement()
    feats = dict.fromkeys(PARAMS, 0.0)
    first_consumer: dict[tuple[str, str], str] = {}      # the tensor goes once per (unit, PU)
    for e in problem.edges:
        first_consumer.setdefault((e.src, place[e.dst][1]), e.dst)
    for (src, dst), consumer in sorted(first_consumer.items()):
        cls = switch_class(kinds[place[src][1]], kinds[dst]) if place[src][1] != dst else None
        if cls:     # CPU work, at the copying CPU's level (as Transfers.time_ms)
            factor = prof.transfers.scaling(place[src][1], dst, plan.levels.get(consumer))[0]
            feats[cls] += size_ms[src] * factor
    if NPU in prof.pus:
        starts = segment_starts(problem, plan, NPU)
        if len(starts) >= 2:
            feats["reentry"] = sum(prof.time(problem.index[u], NPU, plan.levels[u]) for u in starts)
    return Sample(run, ev.latency_ms, np.array([feats[p] for p in PARAMS]))


def fit_switch(samples: list[Sample]) -> dict[str, float]:
    """The switch classes' ``k`` and the NPU's re-entry factor: non-negative least squares in
    relative error over the runs that switch."""
    used = [s for s in samples if s.switches]
    if not used:
        return dict.fromkeys(PARAMS, 0.0)
    w = np.array([1.0 / s.run.latency_ms for s in used])
    a = np.array([s.features for s in used]) * w[:, None]
    b = np.array([s.run.latency_ms - s.base_latency_ms for s in used]) * w
    coef, _ = nnls(a, b)
    return {p: round(float(c), 6) for p, c in zip(PARAMS, coef)}


def predicted_latency(s: Sample, values: dict[str, float]) -> float:
    return s.base_latency_ms + float(s.features @ np.array([values[p] for p in PARAMS]))


def fit_whole_graph(profiles: dict[str, Profile], runs: list[Run]) -> float | None:
    """Share of the summed NPU block times that the whole network as one NPU graph takes, from
    the serial all-NPU runs of networks with per-block NPU times: least squares of the measured
    block part (latency less the input and output stages) against the profiled sum."""
    pairs = []
    for run in runs:
        prof = profiles.get(run.network)
        if prof is None or NPU not in prof.pus or set(run.mapping) != {NPU} or run.mode != "serial":
            continue
        prob = chain_problem(bare(prof))
        try:
            plan = plan_for(prob, run.mapping, run.mode, run.freq, source=run.source)
        except (ValueError, KeyError):
            continue
        blocks = sum(prof.time(i, NPU, plan.levels[u]) for i, u in enumerate(prof.units))
        ev = evaluate(prob, plan)
        pairs.append((run.latency_ms - (ev.latency_ms - blocks), blocks))
    if not pairs:
        return None
    share = sum(m * t for m, t in pairs) / sum(t * t for _, t in pairs)
    return round(min(1.0, max(share, 1e-3)), 6)


def fit_power_share(pairs: list[tuple[float, float, float]]) -> float | None:
    """``concurrent_power_share`` from (measured board power, predicted with share 0, predicted
    with share 1) per pipelined run (the prediction is linear in the share): least squares in
    relative error, kept within [0, 1]."""
    rows = [(m, e0, e1) for m, e0, e1 in pairs if e1 != e0]
    if not rows:
        return None
    num = sum((m - e0) * (e1 - e0) / m**2 for m, e0, e1 in rows)
    den = sum((e1 - e0) ** 2 / m**2 for m, e0, e1 in rows)
    return min(1.0, max(0.0, num / den))


def lowest_board_power(profiles: dict[str, Profile]) -> float:
    """The lowest whole-board power of any measured block or phase (mW)."""
    values = [v for p in profiles.values() for by in p.power_mw.values() for vs in by.values() for v in vs if v]
    values += [ph.power_mw for p in profiles.values() for table in (p.input_stage, p.output_stage)
               for by in table.values() for ph in by.values() if ph.power_mw]
    return min(values)


@dataclass(frozen=True)
class Parameters:
    switch: dict[str, SwitchCost]                 # switch class -> cost
    reentry: float                                # NPU re-entry factor
    whole_graph: float | None                     # NPU whole-graph share
    size_ms: dict[str, dict[str, float]]          # network -> unit -> size measure
    static_power_mw: float | None
    concurrent_power_share: float


def _switch_costs(values: dict[str, float]) -> dict[str, SwitchCost]:
    return {c: SwitchCost(per_size=values[c]) for c in CLASSES if values[c] > 0}


def _samples(profiles: dict[str, Profile], runs: list[Run], sizes: dict[str, dict[str, float]]) -> list[Sample]:
    problems = {n: chain_problem(bare(p)) for n, p in profiles.items()}
    out = []
    for run in runs:
        if run.network in problems:
            s = sample(run, problems[run.network], sizes[run.network])
            if s is not None:
                out.append(s)
    return out


def _steady_pairs(profiles: dict[str, Profile], runs: list[Run],
                  params: Parameters) -> list[tuple[Run, float, float, float, float]]:
    """(run, measured board power W, predicted power with share 0, with share 1, predicted
    period ms) per pipelined run. The share is fitted on power, not on energy per inference, so
    that the period's own error (which the share cannot fix) does not leak into it; the
    prediction is linear in the share."""
    out = []
    for run in runs:
        if run.steady_mj is None or run.network not in profiles:
            continue
        base = with_parameters(bare(profiles[run.network]), params, run.network)
        power = []
        for share in (0.0, 1.0):
            prob = chain_problem(dataclasses.replace(base, concurrent_power_share=share))
            ev = evaluate(prob, plan_for(prob, run.mapping, run.mode, run.freq, source=run.source))
            power.append(ev.energy_ss_mj / ev.period_ms)
        out.append((run, run.steady_mj / run.period_ms, power[0], power[1], ev.period_ms))
    return out


def fitted_parameters(profiles: dict[str, Profile], runs: list[Run]) -> Parameters:
    """Every parameter, each from the runs that measure it (module docstring)."""
    fallback = median_size_ms(list(profiles.values()))
    sizes = {n: size_measures(p, fallback) for n, p in profiles.items()}
    values = fit_switch(_samples(profiles, runs, sizes))
    params = Parameters(_switch_costs(values), values["reentry"], fit_whole_graph(profiles, runs), sizes,
                        round(lowest_board_power(profiles), 3), 1.0)
    share = fit_power_share([p[1:4] for p in _steady_pairs(profiles, runs, params)])
    return dataclasses.replace(params, concurrent_power_share=1.0 if share is None else round(share, 6))


def fitted_documents(docs: dict[str, dict], runs: list[Run]) -> dict[str, dict]:
    """Profile documents (khadas_import) with the fitted parameters written in."""
    profiles = {n: profile_from_dict(d, f"khadas-vim3/{n}") for n, d in docs.items()}
    params = fitted_parameters(profiles, runs)
    out = {}
    for name, doc in docs.items():
        fitted = with_parameters(profiles[name], params, name).to_dict()
        new = dict(doc)
        for key in ("static_power_mw", "concurrent_power_share", "reentry", "whole_graph"):
            if key in fitted:
                new[key] = fitted[key]
        new["transfers"] = {**doc["transfers"],
                            **{k: fitted["transfers"][k] for k in ("switch", "size_ms") if k in fitted["transfers"]}}
        profile_from_dict(new, f"khadas-vim3/{name}")
        out[name] = new
    return out


@dataclass(frozen=True)
class Check:
    """One measured figure against the model: fitted on every run, and cross-validated."""

    run: Run
    metric: str            # latency / steady_energy
    measured: float
    fitted: float          # parameters fitted on all runs
    kfold: float           # parameters fitted without this run's fold
    lono: float | None     # parameters fitted without this run's network (None: nothing left)


def cross_validation(profiles: dict[str, Profile], runs: list[Run], folds: int = 10, seed: int = 0) -> list[Check]:
    """Cross-validated predictions of every switching run's latency and every pipelined run's
    steady-state energy: k-fold over runs (seeded) and leave one network out."""
    fallback = median_size_ms(list(profiles.values()))
    sizes = {n: size_measures(p, fallback) for n, p in profiles.items()}
    samples = [s for s in _samples(profiles, runs, sizes) if s.switches]
    full = fit_switch(samples)
    order = np.random.default_rng(seed).permutation(len(samples))
    fold_of = {int(i): k % folds for k, i in enumerate(order)}
    by_fold = {k: fit_switch([s for j, s in enumerate(samples) if fold_of[j] != k]) for k in range(folds)}
    networks = sorted({s.run.network for s in samples})
    by_net = {n: fit_switch([s for s in samples if s.run.network != n]) for n in networks}
    out = [Check(s.run, "latency", s.run.latency_ms, predicted_latency(s, full),
                 predicted_latency(s, by_fold[fold_of[j]]),
                 predicted_latency(s, by_net[s.run.network]) if len(networks) > 1 else None)
           for j, s in enumerate(samples)]
    params = fitted_parameters(profiles, runs)
    pairs = _steady_pairs(profiles, runs, params)
    share = fit_power_share([p[1:4] for p in pairs]) or 0.0

    def held_out(run: Run, train: list[Run], default: float | None) -> float | None:
        """``run``'s steady-state energy from parameters fitted on ``train`` only: the switch
        costs and re-entry (they set the predicted period and the power at share 0 and 1) and
        the power share. (The NPU whole-graph share enters no pipelined run.)"""
        kept = {id(r) for r in train}
        values = fit_switch([s for s in samples if id(s.run) in kept])
        fold = dataclasses.replace(params, switch=_switch_costs(values), reentry=values["reentry"])
        rows = [p[1:4] for p in _steady_pairs(profiles, train, fold)]
        fitted = fit_power_share(rows) if rows else None
        if fitted is None and default is None:
            return None
        (_, _, p0, p1, period), = _steady_pairs(profiles, [run], fold)
        gamma = default if fitted is None else fitted
        return (p0 + gamma * (p1 - p0)) * period

    for run, _, p0, p1, period in pairs:
        out.append(Check(run, "steady_energy", run.steady_mj, (p0 + share * (p1 - p0)) * period,
                         held_out(run, [r for r in runs if r is not run], 0.0),
                         held_out(run, [r for r in runs if r.network != run.network], None)))
    return out
