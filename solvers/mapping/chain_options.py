"""What the exact chain models (``cpsat_chain.py``, ``milp_chain.py``) choose from: per unit of
a chain, its options (PU, DVFS level, cold or warm), the cost of each option and of each
transfer into it, split into *variants* that make the evaluator's non-per-unit rules linear.

On a chain (units b0 -> b1 -> ... in the instance's order) with disjoint PU sets a stage is a
contiguous run of units and its units run one after another, so every time and energy the
evaluator counts belongs to one unit: the unit's own time (its PU and level, times the factors
below), the transfer that brings its input (sent from the previous unit's PU, scaled by *this*
unit's level: the copying CPU is the receiver's), the input phase (first unit, by its PU and
level) and the output phase (last unit). A stage lasts the sum of its units' costs, the latency
is the sum of all of them and equals the summed phase time, the period is the largest stage.

Variants (the evaluator's ``time_factors``):

* **re-entry** (``Profile.reentry``, the NPU): on a PU with factor k the first unit of every
  segment takes (1 + k) x its time, but only when the PU holds two or more segments. Per such
  PU the plans split into (a) at most one segment there, no penalty (the model requires the
  PU's units to be one run), and (b) two or more segments, where the first unit of each is
  *cold*: its options carry (1 + k) x time and energy, and the model makes "cold" equal "on
  this PU and the previous unit is not" and requires two or more cold units. Every plan lies in
  exactly one of (a) and (b) and each scores it exactly as the evaluator does, so the optimum
  is the better of the two optima (min over the variants; with several such PUs, over every
  combination).
* **whole graph** (``Profile.whole_graph``): the one plan with every unit on that PU (which then
  is one stage) runs every unit at share r of its time. That plan is its own variant (every
  unit on that PU, one stage, factor r; still one option per level, so with DVFS its levels
  are chosen too) and the other variants exclude it (that PU may not hold every unit).

Pruning (exact): an option of unit i is dropped when another option of the same unit, PU and
cold/warm kind is at least as good whatever the rest of the plan is. Swapping one option of a
unit for another on the same PU changes only that unit's cost entries: its own time and energy,
the transfer into it (its level scales the copy) and the input/output phase when it is the
first/last unit; the stage structure, the segments and every other unit's costs stay. So option
o' dominates o when, for every PU q the previous unit may run on, the entry (time t', energy e')
of o' after a transfer from q is no worse than o's (t, e):

* objectives and bounds among period, latency and energy per frame (all non-decreasing in every
  entry's time and energy): t' <= t and e' <= e;
* steady-state energy (``energy_ss``): on a chain E_ss = P_s P + gamma D + (1 - gamma) D P / L,
  with D = E - P_s L the dynamic energy, P the period, L the latency (= summed phase time). A
  faster entry can raise E_ss (it shortens L and so raises D / L). Swap o (t, d = e - P_s t) for
  o' (t', d') with dt = t - t' >= 0 and dd = d - d' >= 0: the period does not grow, and
  dE_ss/dP = gamma P_s + (1 - gamma) E / L >= 0, so E_ss(P', D', L') <= E_ss(P, D', L'); and
  E_ss(P, D - dd, L - dt) <= E_ss(P, D, L) exactly when
  dd >= dt (D / L) G(P / L'),  G(u) = (1 - gamma) u / (gamma + (1 - gamma) u),  L' = L - dt.
  G grows with u. D / L is a time-weighted mean of the phases' dynamic powers, at most ``dyn``
  (the largest, or less where the caller knows more: :class:`SteadyRule`). P / L' is at most
  P_cap / L_min (a period cap, L_min the least latency of any plan), and, when the plans' share
  P / L is at most s, at most s (L_min + dt) / L_min (as L >= L_min + dt). So o' dominates o when
  t' <= t and d - d' >= kappa(dt) (t - t') for every source q, kappa(dt) = max(0, dyn) G(that
  bound). That implies e' <= e, so caps on period, latency and energy stay met. A plan's own
  replacements only lower (t, d) entry by entry, so replacing dominated options one after
  another ends, with E_ss no higher and every cap still met.

Among options with equal entries the one listed last (the faster level) stays.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from pipeplan.formulations.mapping.plan import Plan, Stage
from pipeplan.formulations.mapping.problem import MappingProblem

MONOTONE = None    # the dominance rule of period, latency, energy (else a SteadyRule)


@dataclass(frozen=True)
class SteadyRule:
    """The steady-state energy's dominance rule (module docstring): the plans concerned have a
    dynamic power D / L of at most ``dyn`` (mW) and a share P / L of at most ``share``."""

    dyn: float
    share: float
    gamma: float
    least_latency: float

    def kappa(self, dt: float) -> float:
        """The least dynamic energy per ms (mW) a faster option must save over dt ms to dominate."""
        u = self.share * (self.least_latency + dt) / max(self.least_latency, 1e-12)
        g = (1 - self.gamma) * u / (self.gamma + (1 - self.gamma) * u) if u > 0 else 0.0
        return max(0.0, self.dyn) * g


@dataclass(frozen=True)
class Option:
    pu: str
    level: str
    cold: bool          # the first unit of a segment on a re-entry PU holding >= 2 segments
    time: float         # ms: the unit's time (factors applied) plus the input/output phase it carries
    energy: float       # uJ (mW x ms), the same parts


@dataclass
class Variant:
    """One part of the plan space (module docstring). ``options[i]``: unit i's options;
    ``arcs[i]``: for i >= 1, (source PU, option index) -> (ms, uJ) of the transfer into unit i
    (only pairs that cost something; the same PU never does)."""

    name: str
    options: list[list[Option]]
    arcs: list[dict[tuple[str, int], tuple[float, float]]]
    one_segment: tuple[str, ...] = ()       # PUs whose units form at most one run
    many_segments: tuple[str, ...] = ()     # PUs with >= 2 runs; their cold options mark each run's first unit
    single_stage: bool = False              # whole graph: one stage
    not_all_on: tuple[str, ...] = ()        # PUs that may not hold every unit (the whole-graph variant's plan)
    pruned: int = 0                         # options dropped as dominated
    min_cold: int = 2                       # least cold units of a many-segment PU (0: another network evicts it)
    pus: list[list[str]] = field(default_factory=list)   # per unit, the PUs of its options (profile order)

    def __post_init__(self):
        order = {p: k for k, p in enumerate(dict.fromkeys(o.pu for opts in self.options for o in opts))}
        self.pus = [sorted({o.pu for o in opts}, key=order.get) for opts in self.options]


def check_chain(problem: MappingProblem) -> None:
    """ValueError unless the instance is a chain in its unit order (what these models need)."""
    if not problem.is_chain:
        raise ValueError(f"{problem.name} is not a chain: the chain models need edges b0 -> b1 -> ... in unit order")


def levels_of(problem: MappingProblem, i: int, pu: str, dvfs: bool) -> list[str]:
    """The levels at which unit i can run on ``pu`` (slowest first): every level with a time
    under ``dvfs``, else the top level alone (if the unit can run there)."""
    prof = problem.profile
    levels = prof.pus[pu].levels if dvfs else (prof.pus[pu].max_level,)
    return [lv for lv in levels if prof.time(i, pu, lv) is not None]


def variants(problem: MappingProblem, dvfs: bool, rule: SteadyRule | None = MONOTONE) -> list[Variant]:
    """Every variant of the chain's plan space (module docstring), options pruned by the rule of
    the monotone objectives (``rule`` None) or by the steady-state energy's ``rule``."""
    check_chain(problem)
    prof = problem.profile
    n = len(problem.units)
    runnable = {p: all(levels_of(problem, i, p, dvfs) for i in range(n)) for p in prof.pus}
    whole = tuple(p for p, r in prof.whole_graph.items() if runnable[p])
    reentry = [p for p, k in prof.reentry.items() if k > 0 and any(levels_of(problem, i, p, dvfs) for i in range(n))]
    out = []
    for kinds in itertools.product(("one", "many"), repeat=len(reentry)):
        many = tuple(p for p, k in zip(reentry, kinds) if k == "many")
        one = tuple(p for p, k in zip(reentry, kinds) if k == "one")
        name = ", ".join(f"{p}: {'one segment' if k == 'one' else 'two or more segments'}"
                         for p, k in zip(reentry, kinds)) or "all plans"
        if whole:
            name += "; not all on " + "/".join(whole)
        v = _build(problem, name, dvfs, rule, factor={}, cold=set(many), only=None)
        v.one_segment, v.many_segments, v.not_all_on = one, many, whole
        out.append(v)
    for p in whole:
        v = _build(problem, f"whole graph on {p}", dvfs, rule, factor={p: prof.whole_graph[p]}, cold=set(), only=p)
        v.single_stage = True
        out.append(v)
    return out


def steady_rule(problem: MappingProblem, dvfs: bool, dyn: float | None = None, share: float = 1.0,
                period_cap: float | None = None) -> SteadyRule:
    """The steady-state energy's dominance rule for plans with dynamic power at most ``dyn``
    (default: the largest dynamic power of any phase), share P / L at most ``share`` and period
    at most ``period_cap`` (ms)."""
    prof = problem.profile
    static, gamma = prof.static_power_mw or 0.0, prof.concurrent_power_share
    largest = _power_max(problem, dvfs) - static
    least = least_latency(problem, dvfs)
    if period_cap is not None and math.isfinite(period_cap) and least > 0:
        share = min(share, period_cap / least)
    return SteadyRule(largest if dyn is None else min(dyn, largest), share, gamma, least)


def least_latency(problem: MappingProblem, dvfs: bool) -> float:
    """No plan's latency is below this (ms): every unit at its fastest, transfers and phases
    free."""
    prof = problem.profile
    factors = [1.0] + [r for r in prof.whole_graph.values()]
    return min(factors) * sum(min(prof.time(i, p, lv) for p in prof.pus for lv in levels_of(problem, i, p, dvfs))
                              for i in range(len(problem.units)))


def _build(problem: MappingProblem, name: str, dvfs: bool, rule: SteadyRule | None, *, factor: dict[str, float],
           cold: set[str], only: str | None) -> Variant:
    prof = problem.profile
    units = [u.name for u in problem.units]
    n = len(units)
    edge = {(e.src, e.dst): e for e in problem.edges}
    options: list[list[Option]] = []
    for i in range(n):
        opts = []
        for p in prof.pus:
            if only is not None and p != only:
                continue
            for lv in levels_of(problem, i, p, dvfs):
                for is_cold in ((False, True) if p in cold else (False,)):
                    f = factor.get(p, 1.0) * (1.0 + prof.reentry[p] if is_cold else 1.0)
                    t = prof.time(i, p, lv) * f
                    e = t * prof.power(i, p, lv)
                    for table, end in ((prof.input_stage, 0), (prof.output_stage, n - 1)):
                        ph = table.get(p, {}).get(lv) if i == end else None
                        if ph:
                            t, e = t + ph.time_ms, e + ph.time_ms * ph.power_mw
                    opts.append(Option(p, lv, is_cold, t, e))
        options.append(opts)
    arcs: list[dict] = [{}]
    for i in range(1, n):
        e = edge[(units[i - 1], units[i])]
        sources = [p for p in prof.pus if any(o.pu == p for o in options[i - 1])]
        here = {}
        for k, o in enumerate(options[i]):
            for q in sources:
                if q == o.pu:
                    continue
                t = prof.transfers.time_ms(e.src, q, o.pu, e.bytes, o.level)
                if t:
                    here[(q, k)] = (t, t * prof.transfers.power_mw * prof.transfers.scaling(q, o.pu, o.level)[1])
        arcs.append(here)
    return _prune(Variant(name, options, arcs), problem, rule)


def _prune(v: Variant, problem: MappingProblem, rule: SteadyRule | None) -> Variant:
    """Drop dominated options (module docstring); ``rule``: None for the monotone rule."""
    static = problem.profile.static_power_mw or 0.0
    kept_opts, kept_arcs, dropped = [], [{}], 0
    for i, opts in enumerate(v.options):
        sources = sorted({o.pu for o in v.options[i - 1]}) if i else [None]

        def entries(k: int) -> list[tuple[float, float]]:
            o = opts[k]
            out = []
            for q in sources:
                t, e = v.arcs[i].get((q, k), (0.0, 0.0)) if q is not None else (0.0, 0.0)
                out.append((o.time + t, o.energy + e))
            return out

        cost = [entries(k) for k in range(len(opts))]

        def dominates(a: int, b: int) -> bool:
            for (ta, ea), (tb, eb) in zip(cost[a], cost[b]):
                if ta > tb:
                    return False
                if rule is None:
                    if ea > eb:
                        return False
                elif (eb - static * tb) - (ea - static * ta) < rule.kappa(tb - ta) * (tb - ta):
                    return False
            return True

        keep = []
        for b in range(len(opts)):
            group = [a for a in range(len(opts)) if a != b and opts[a].pu == opts[b].pu and opts[a].cold == opts[b].cold]
            # b goes when some a dominates it, unless they are equal and b is listed later
            if any(dominates(a, b) and (not dominates(b, a) or a > b) for a in group):
                dropped += 1
            else:
                keep.append(b)
        new_index = {old: k for k, old in enumerate(keep)}
        kept_opts.append([opts[k] for k in keep])
        if i:
            kept_arcs.append({(q, new_index[k]): c for (q, k), c in v.arcs[i].items() if k in new_index})
    # transfers from a PU the previous unit lost every option on cannot happen
    for i in range(1, len(kept_opts)):
        sources = {o.pu for o in kept_opts[i - 1]}
        kept_arcs[i] = {key: c for key, c in kept_arcs[i].items() if key[0] in sources}
    return Variant(v.name, kept_opts, kept_arcs, v.one_segment, v.many_segments, v.single_stage, v.not_all_on,
                   pruned=v.pruned + dropped)


def _power_max(problem: MappingProblem, dvfs: bool) -> float:
    """The largest power (mW) of any phase a plan can hold: units, input/output phases, copies."""
    prof = problem.profile
    powers = [prof.power(i, p, lv) for i in range(len(problem.units)) for p in prof.pus
              for lv in levels_of(problem, i, p, dvfs)]
    powers += [ph.power_mw for table in (prof.input_stage, prof.output_stage) for by in table.values()
               for ph in by.values()]
    tr = prof.transfers
    if tr.power_mw:
        powers += [tr.power_mw * f[1] for by in tr.level_scaling.values() for f in by.values()] + [tr.power_mw]
    return max(powers)


def chain_plan(problem: MappingProblem, v: Variant, choice: list[int], new_stage: list[bool], dvfs: bool) -> Plan:
    """The plan of option ``choice[i]`` per unit, a new stage starting at unit i where
    ``new_stage[i]`` (i >= 1); levels are written only under ``dvfs`` (else every unit is at its
    PU's top level, the plan's default)."""
    units = [u.name for u in problem.units]
    pus = list(problem.profile.pus)
    stages: list[dict[str, list[str]]] = [{}]
    levels = {}
    for i, u in enumerate(units):
        if i and new_stage[i]:
            stages.append({})
        o = v.options[i][choice[i]]
        stages[-1].setdefault(o.pu, []).append(u)
        levels[u] = o.level
    return Plan(tuple(Stage(tuple(p for p in pus if p in st), {p: tuple(st[p]) for p in pus if p in st})
                      for st in stages),
                levels=levels if dvfs else {}, instance=problem.name)


def option_index(v: Variant, i: int, pu: str, level: str, cold: bool) -> int | None:
    """The index of unit i's option (pu, level, cold) in ``v``, None when pruned or absent."""
    for k, o in enumerate(v.options[i]):
        if o.pu == pu and o.level == level and o.cold == cold:
            return k
    return None


def plan_options(v: Variant, problem, plan) -> list[int | None]:
    """Per unit, the index of ``plan``'s option in ``v`` (None where the variant lacks it): the
    warm start both chain models hint."""
    place = plan.placement()
    prof = problem.profile
    units = [u.name for u in problem.units]
    out = []
    for i, u in enumerate(units):
        pu = place[u][1]
        cold = pu in v.many_segments and (i == 0 or place[units[i - 1]][1] != pu)
        out.append(option_index(v, i, pu, prof.level(pu, plan.levels.get(u, "max")), cold))
    return out
