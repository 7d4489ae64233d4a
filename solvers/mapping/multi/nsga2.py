"""NSGA-II (pymoo) and a local search over joint plans of chain networks, for one objective
of the multi-network problem (fairness, total, rate or energy); infeasible plans are handled
as a constraint.

**Genotype.** One gene per unit of every network, the networks one after the other: the index
of the unit's PU in its network's profile. Consecutive units on one PU form a stage (as a
mapping string does, ``formulations/mapping/plan.plan_from_string``). By default each PU holds
at most one stage of each network (disjoint PU sets, the plan space of the exact joint models
and the single-network solvers' default): :meth:`JointCodec.repair` moves every unit off the
PUs that cannot run it and merges runs that would reuse a PU, so the search space is the chain
plans with one PU per stage. With ``shared_pus`` a PU may hold runs of a network apart (a
``shared_pus`` plan, which the single-network evaluator scores, re-entry included): a larger
space, where a PU may serve two stages of one network.
Operator graphs have no such encoding: ``ValueError``.

**Search.** The work is split into independent rounds (``_round``). Each runs NSGA-II with
one objective and one constraint (the violation): two-point crossover over the whole vector
(it exchanges ranges of units, often a network's plan whole) and a mutation that moves whole
runs of units (shift a stage boundary, move a stage to another PU, open a new stage), since a
pipeline improves by moving boundaries, which redrawing single genes reaches only through
plans full of one-unit stages. Then a local search (``polish``) from the best plans: the
fairness and rate objectives are the largest of several loads (each network's period, each
PU's summed work), and their best plans balance those loads finely, which a genetic search
approaches but rarely reaches; balancing takes pairs of moves (one unit onto a PU, another
off it), which the local search tries where single moves fail. Kicks (a mutation, then the
local search again) continue from the best plan until they stop finding better ones.

**Scoring.** Every plan met is scored once (an archive keyed by the genes), each network's
single evaluation cached by its genes and the PUs other networks evict it from, so a network
whose plan did not change costs nothing. The objective and the rules of the joint evaluator
(deadlines on the worst-case latency, demanded rates, one network per PU when partitioned)
are recomputed here from those evaluations, the constraint value being the summed relative
excess over each rule (the number of networks too many on a partitioned PU, and without
``shared_pus`` the runs beyond one per PU that the repair could not merge): ``evaluate_joint``
solves the total objective's linear program for every plan, about 1 ms, several times a
plan's scoring here. For the total objective the search does call it (with the cached
evaluations) on feasible plans, which makes that objective several times slower. The returned
plan is re-scored by the joint evaluator in any case, and the tests hold the two to the same
numbers.

**Seeds.** The baselines' plans (alone-best-pu, npu-only, own-optimum, greedy-partition),
always scored, and their combinations network by network start every round's population, so
the result is never worse than any baseline plan that is feasible; the rest is random plans of
a few stages each.

**Limits.** ``max_evaluations`` is the work limit (distinct joint plans scored; plans met again
cost nothing), as in the single-network NSGA-II: with the same seed a run the work limit stops
returns the same plan on any machine load. The time limit covers seeding (at most half of it),
the search and the final scoring; ``stopped_by`` says which limit stopped a run; a plan that
reaches ``common.analytic_bound`` ends the run at once (it is optimal). With the defaults
(30,000 plans, populations of 100) a run on the Khadas pairs and trio takes 4-10 s for the
fairness objective, up to 25 s for the rate and 50 s for the total (one loaded core); on
yolo+mobile and alex+mobile it finds the exact joint models' proven fairness optimum.
"""
from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np

from pipeplan.core.deadline import Deadline, OutOfTime
from pipeplan.core.registry import register
from pipeplan.core.result import Quality, SolveResult, Termination, stop_note
from pipeplan.core.vocabulary import MULTI_OBJECTIVES, MultiAxis
from pipeplan.formulations.mapping.evaluator import Evaluation, InfeasiblePlan, evaluate
from pipeplan.formulations.mapping.multi.evaluator import TOL, evaluate_joint, evicted_pus, pu_time
from pipeplan.formulations.mapping.multi.plan import JointPlan
from pipeplan.formulations.mapping.multi.problem import MultiProblem, reference_fps
from pipeplan.formulations.mapping.plan import Plan, plan_from_assignment
from pipeplan.solvers.mapping.multi.baselines import (
    alone_best_pu_plan,
    greedy_partition_plan,
    npu_only_plan,
    own_optimum_plan,
)
from pipeplan.solvers.mapping.multi.common import analytic_bound, check_objective, scored_joint_result

RESCORE_S = 0.1     # seconds a run keeps for its final scoring (joint evaluation and analytic bound)
GA_SHARE = 0.5      # of the work limit, for the genetic search; the rest polishes its best plans
POLISH_STARTS = 8   # the best plans of the archive that the local search starts from, best first
TIE = 1e-6          # relative weight of the terms in NSGA-II's objective (Score.fitness)
EJECTIONS = 16      # second moves tried per first move of an ejection chain (a random sample)
PATIENCE = 50       # kicks of the iterated local search without a better plan before it stops
BOUND_TOL = 1e-9    # relative: a plan this close to the analytic bound reaches it
STALL = 30          # generations without a better plan that end a round's NSGA-II
ROUNDS = 3          # independent rounds (search and local search) sharing the work limit and the archive


class JointCodec:
    """Gene vectors <-> joint plans. ``x[start[j] + i]`` is the PU (index into ``pus[j]``, the
    profile's PUs of network j) of unit i of network j."""

    def __init__(self, problem: MultiProblem, shared_pus: bool = False):
        self.problem = problem
        self.shared_pus = shared_pus
        self.names, self.pus, self.start, times, upper = [], [], [0], [], []
        for net in problem.networks:
            prob = net.problem
            if not prob.is_chain:
                raise ValueError(f"nsga2 needs chain networks: {net.name} ({prob.name}) is an operator graph")
            pus = tuple(prob.profile.pus)
            self.names.append(tuple(u.name for u in prob.units))
            self.pus.append(pus)
            self.start.append(self.start[-1] + len(prob.units))
            time = np.array([[t if (t := prob.profile.time(i, p, prob.profile.pus[p].max_level)) is not None
                              else np.inf for p in pus] for i in range(len(prob.units))])
            times.append(time)
            upper += [len(pus) - 1] * len(prob.units)
        width = max(map(len, self.pus))
        # [gene, PU index]: the unit's time there at the top level (inf: it cannot run there)
        self.time = np.vstack([np.pad(t, ((0, 0), (0, width - t.shape[1])), constant_values=np.inf) for t in times])
        self.allowed = np.isfinite(self.time)
        self.fastest = np.argmin(self.time, axis=1)     # where a unit that cannot stay goes
        self.upper = np.array(upper)
        self._plans: list[dict[bytes, Plan]] = [{} for _ in problem.networks]

    def part(self, x, j: int) -> np.ndarray:
        return x[self.start[j]:self.start[j + 1]]

    def repair(self, x) -> np.ndarray:
        """Every unit on a PU that runs it: a unit that cannot stay joins the previous unit's PU
        (no new stage) where it can, else moves to its fastest PU. Without ``shared_pus``, then
        every PU holds one run of each network: a unit on a PU an earlier run of its network
        left joins the current run where it can, else opens a run on the fastest PU its network
        has not used (where none is left the plan keeps the shared PU, and the scorer counts it
        as a violation). Idempotent."""
        x = np.clip(np.asarray(x, dtype=np.int64), 0, self.upper)
        bad = ~self.allowed[np.arange(len(x)), x]
        if bad.any():
            firsts = set(self.start[:-1])
            for g in np.flatnonzero(bad):
                prev = x[g - 1] if g not in firsts else -1
                x[g] = prev if prev >= 0 and self.allowed[g, prev] else self.fastest[g]
        if not self.shared_pus:
            for j in range(len(self.pus)):
                self._one_run_per_pu(x, j)
        return x

    def _one_run_per_pu(self, x: np.ndarray, j: int) -> None:
        a0 = self.start[j]
        closed: set[int] = set()
        for g in range(a0 + 1, self.start[j + 1]):
            cur = x[g - 1]
            if x[g] == cur:
                continue
            if x[g] in closed:
                if self.allowed[g, cur]:
                    x[g] = cur
                    continue
                fresh = [p for p in range(self.upper[g] + 1) if self.allowed[g, p] and p != cur and p not in closed]
                if fresh:
                    x[g] = min(fresh, key=lambda p: (self.time[g, p], p))
            closed.add(int(cur))

    def runs_per_pu_excess(self, x, j: int) -> int:
        """Runs of network j beyond one per PU (0 for every repaired vector but a few)."""
        g = self.part(x, j)
        starts = g[np.concatenate([[True], g[1:] != g[:-1]])]
        return len(starts) - len(set(starts.tolist()))

    def network_plan(self, x, j: int) -> Plan:
        """Network j's plan: a stage per run of equal genes, units in chain order."""
        genes = self.part(x, j)
        key = genes.astype(np.int8).tobytes()
        plan = self._plans[j].get(key)
        if plan is None:
            names, pus = self.names[j], self.pus[j]
            stage = np.concatenate([[0], np.cumsum(genes[1:] != genes[:-1])])
            pu_of = {u: pus[g] for u, g in zip(names, genes)}
            plan = plan_from_assignment(names, dict(zip(names, stage.tolist())), pu_of,
                                        shared_pus=bool(len(set(genes.tolist())) < stage[-1] + 1),
                                        instance=self.problem.networks[j].problem.name)
            self._plans[j][key] = plan
        return plan

    def joint_plan(self, x) -> JointPlan:
        return JointPlan({net.name: self.network_plan(x, j) for j, net in enumerate(self.problem.networks)},
                         instance=self.problem.name)

    def encode(self, plan: JointPlan) -> np.ndarray:
        """Genes of a joint plan of chain plans (one PU per unit), repaired."""
        x = np.zeros(self.start[-1], dtype=np.int64)
        for j, net in enumerate(self.problem.networks):
            place = plan.plans[net.name].placement()
            x[self.start[j]:self.start[j + 1]] = [self.pus[j].index(place[u][1]) for u in self.names[j]]
        return self.repair(x)

    def runs(self, genes: np.ndarray) -> list[tuple[int, int]]:
        """[start, end) of every run of equal genes."""
        cuts = [0, *(np.flatnonzero(genes[1:] != genes[:-1]) + 1).tolist(), len(genes)]
        return list(zip(cuts, cuts[1:]))


class Score(NamedTuple):
    value: float                    # the objective, negated when it is maximised
    violation: float                # 0 for a feasible plan
    terms: tuple[float, ...]        # fairness, rate: the terms whose largest the objective is, largest first
    bottleneck: tuple | None        # the largest term's ("net", network index) or ("pu", PU name)

    def rank(self) -> tuple:
        """Feasible first, then the value, then the terms (what the local search minimises)."""
        return self.violation, self.value, self.terms

    def fitness(self) -> float:
        """NSGA-II's objective: the value, ties broken towards a smaller sum of the terms
        relative to the largest (by at most ``TIE`` x the number of terms, relative): all a
        single number can do for the plateaus of a max."""
        return self.value + TIE * abs(self.value) * sum(self.terms) / self.terms[0] if self.terms else self.value


class OutOfWork(Exception):
    """The archive holds ``max_evaluations`` plans and was asked to score a new one."""


class BoundReached(Exception):
    """The plan just scored is feasible and reaches the analytic bound: none is better."""


class JointScorer:
    """Genes -> (value to minimise, constraint violation), every distinct plan scored once."""

    def __init__(self, codec: JointCodec, objective: str, max_evaluations: int | None):
        """Scoring a feasible plan whose value reaches ``common.analytic_bound`` raises
        BoundReached (after archiving it): the search can stop, the plan is optimal."""
        self.codec = codec
        self.problem = problem = codec.problem
        self.objective = objective
        self.sign = -1.0 if MULTI_OBJECTIVES[objective].direction == "max" else 1.0
        self.max_evaluations = max_evaluations
        bound = analytic_bound(problem, objective)
        self.target = None if bound is None else self.sign * bound * (1 + self.sign * BOUND_TOL)
        self.pref = [1000.0 / reference_fps(n) for n in problem.networks]
        self.board = [n.problem.profile.power_model == "board" and n.problem.profile.static_power_mw is not None
                      for n in problem.networks]
        self.static = max([(n.problem.profile.static_power_mw or 0.0) if b else 0.0
                           for n, b in zip(problem.networks, self.board)])
        self.scores: dict[bytes, Score] = {}
        self._single: dict[tuple[int, bytes, frozenset], Evaluation] = {}

    def key(self, x) -> bytes:
        return np.asarray(x).astype(np.int8).tobytes()

    def genes(self, key: bytes) -> np.ndarray:
        return np.frombuffer(key, dtype=np.int8).astype(np.int64)

    def score(self, x, *, force: bool = False) -> Score:
        """``force``: past the work limit too (the run's first seed)."""
        key = self.key(x)
        if key not in self.scores:
            if not force and self.max_evaluations is not None and len(self.scores) >= self.max_evaluations:
                raise OutOfWork
            sc = self.scores[key] = self._score(np.asarray(x))
            if self.target is not None and sc.violation == 0 and sc.value <= self.target:
                raise BoundReached
        return self.scores[key]

    def _single_eval(self, x, j: int, evicted: frozenset) -> Evaluation:
        key = (j, self.codec.part(x, j).astype(np.int8).tobytes(), evicted)
        ev = self._single.get(key)
        if ev is None:
            ev = self._single[key] = evaluate(self.problem.networks[j].problem, self.codec.network_plan(x, j),
                                              check=False, evicted=evicted)
        return ev

    def _score(self, x) -> Score:
        """The joint evaluator's rules and objective (formulations/mapping/multi/evaluator.py)."""
        problem, nets = self.problem, self.problem.networks
        plan = self.codec.joint_plan(x)
        evicted = evicted_pus(problem, plan)
        evs = [self._single_eval(x, j, evicted[n.name]) for j, n in enumerate(nets)]
        busy = [pu_time(ev) for ev in evs]      # units' times plus the transfers into each PU
        used = [set(plan.pus_of(n.name)) for n in nets]
        load: dict[str, float] = {}
        for bt in busy:
            for p, b in bt.items():
                load[p] = load.get(p, 0.0) + b
        violation = 0.0 if self.codec.shared_pus else float(sum(self.codec.runs_per_pu_excess(x, j)
                                                                   for j in range(len(nets))))
        if problem.sharing == "partitioned":
            for p in load:
                violation += max(0, sum(p in u for u in used) - 1)
        for n, ev, bt, u in zip(nets, evs, busy, used):
            if n.latency_ms is not None:
                wait = sum(load[p] - bt.get(p, 0.0) for p in u) if problem.sharing == "time_shared" else 0.0
                violation += _excess(ev.latency_ms + wait, n.latency_ms)
            if n.min_fps is not None:
                violation += _excess(ev.period_ms * n.min_fps, 1000.0)
        if any(n.min_fps is not None for n in nets):
            for p in load:
                violation += _excess(sum((n.min_fps or 0.0) * bt.get(p, 0.0) for n, bt in zip(nets, busy)),
                                     1000.0)
        terms: list[float] = []
        if self.objective == "fairness":
            terms = [ev.period_ms / pr for ev, pr in zip(evs, self.pref)] + \
                    [sum(bt.get(p, 0.0) / pr for bt, pr in zip(busy, self.pref)) for p in problem.pu_names]
            value = 1.0 / max(terms)
        elif self.objective == "rate":
            terms = [ev.period_ms for ev in evs] + [load.get(p, 0.0) for p in problem.pu_names]
            value = 1000.0 / max(terms)
        elif self.objective == "energy":
            value = self.static + sum(
                n.min_fps * (ev.energy_mj - (n.problem.profile.static_power_mw * ev.phases_ms / 1000.0 if b else 0.0))
                for n, ev, b in zip(nets, evs, self.board))
        elif violation == 0.0:     # total: the rates are a linear program's, the evaluator's own
            mine = {n.name: ev for n, ev in zip(nets, evs)}
            value = evaluate_joint(problem, plan, lambda net, _: mine[net.name]).weighted_fps
        else:
            value = 0.0
        bottleneck = None
        if terms:
            top = int(np.argmax(terms))
            bottleneck = ("net", top) if top < len(nets) else ("pu", problem.pu_names[top - len(nets)])
        return Score(self.sign * value, violation, tuple(sorted(terms, reverse=True)), bottleneck)

    def ranked(self) -> list[bytes]:
        """Every plan scored, best first (ties: the first scored)."""
        return sorted(self.scores, key=lambda k: self.scores[k].rank())


def _excess(value: float, limit: float) -> float:
    """Relative excess of ``value`` over ``limit``, 0 within the evaluator's tolerance."""
    return value / limit - 1.0 if value > limit * (1 + TOL) else 0.0


def _mutate(codec: JointCodec, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One or more moves (geometric count), each on one network's genes: shift a stage
    boundary by 1-3 units (40%), move a run to another PU (25%), open a new stage over a random
    range (25%), redraw one gene (10%)."""
    y = x.copy()
    for _ in range(rng.geometric(0.6)):
        j = int(rng.integers(len(codec.pus)))
        g = y[codec.start[j]:codec.start[j + 1]]       # a view: moves write into y
        n, k = len(g), len(codec.pus[j])
        move = rng.random()
        bounds = np.flatnonzero(g[1:] != g[:-1]) + 1
        if move < 0.4 and len(bounds):
            b, d = int(rng.choice(bounds)), int(rng.integers(1, 4))
            if rng.random() < 0.5:
                g[b:b + d] = g[b - 1]
            else:
                g[max(0, b - d):b] = g[b]
        elif move < 0.65:
            runs = codec.runs(g)
            a, e = runs[int(rng.integers(len(runs)))]
            g[a:e] = rng.integers(k)
        elif move < 0.9:
            a = int(rng.integers(n))
            g[a:a + int(rng.integers(1, max(2, n // 3)))] = rng.integers(k)
        else:
            g[rng.integers(n)] = rng.integers(k)
    return y


def _random_plan(codec: JointCodec, rng: np.random.Generator) -> np.ndarray:
    """Each network cut into 1..|PUs| contiguous stages at random points, each on a random PU."""
    x = np.zeros(codec.start[-1], dtype=np.int64)
    for j, pus in enumerate(codec.pus):
        n = codec.start[j + 1] - codec.start[j]
        stages = int(rng.integers(1, min(len(pus), n) + 1))
        cuts = np.sort(rng.choice(np.arange(1, n), size=stages - 1, replace=False)) if stages > 1 else []
        for a, e in zip([0, *cuts], [*cuts, n]):
            x[codec.start[j] + a:codec.start[j] + e] = rng.integers(len(pus))
    return codec.repair(x)


def _moves(codec: JointCodec, x: np.ndarray) -> list[tuple[int, int, int]]:
    """Moves (genes [a, e) to PU index p) one step from ``x``: one unit to another PU, a whole
    run to another PU (a stage moved, or merged into a neighbour), a stage boundary shifted by
    two or three units."""
    moves = []
    for j, pus in enumerate(codec.pus):
        a0, g = codec.start[j], codec.part(x, j)
        for i, cur in enumerate(g):
            moves += [(a0 + i, a0 + i + 1, p) for p in range(len(pus)) if p != cur]
        for a, e in codec.runs(g):
            if e - a > 1:
                moves += [(a0 + a, a0 + e, p) for p in range(len(pus)) if p != g[a]]
            if a > 0:
                moves += [(a0 + a, a0 + a + d, int(g[a - 1])) for d in (2, 3) if a + d <= e]
                moves += [(a0 + a - d, a0 + a, int(g[a])) for d in (2, 3) if a - d >= 0]
    return moves


def _hot_genes(codec: JointCodec, x: np.ndarray, bottleneck: tuple) -> list[int]:
    """The genes whose units make the largest term: the network's, or those on the PU."""
    kind, what = bottleneck
    if kind == "net":
        return list(range(codec.start[what], codec.start[what + 1]))
    return [codec.start[j] + i for j, pus in enumerate(codec.pus) if what in pus
            for i in np.flatnonzero(codec.part(x, j) == pus.index(what))]


def _network_of(codec: JointCodec, gene: int) -> int:
    return int(np.searchsorted(codec.start, gene, side="right")) - 1


def polish(codec: JointCodec, scorer: JointScorer, x: np.ndarray, rng: np.random.Generator,
           deadline: Deadline) -> np.ndarray:
    """Descent from ``x`` to a local optimum of :meth:`Score.rank`: first improvement, in
    random order with the moves of the bottleneck's units first. The terms break ties of the
    objective, so that the search crosses the plateaus of a max (fairness, rate), where easing
    the second bottleneck changes nothing until the first eases too. When no single move
    (:func:`_moves`) improves, ejection chains: a unit of the bottleneck to another PU, and a
    unit (of any network) off that PU to a third or back (a sample of ``EJECTIONS``): balancing
    loads needs such pairs, each half of which alone overloads a PU. Raises OutOfTime /
    OutOfWork past the limits (the archive keeps every plan met)."""
    best = scorer.score(x)

    def better(y: np.ndarray) -> bool:
        deadline.check()
        y = codec.repair(y)
        return not np.array_equal(y, x) and scorer.score(y).rank() < best.rank()

    while True:
        found = None
        moves = _moves(codec, x)
        hot = set(_hot_genes(codec, x, best.bottleneck)) if best.bottleneck is not None else set()
        order = sorted(rng.permutation(len(moves)), key=lambda k: not hot.intersection(range(*moves[k][:2])))
        for k in order:
            a, e, p = moves[k]
            y = x.copy()
            y[a:e] = p
            if better(y):
                found = y
                break
        if found is None and best.bottleneck is not None:
            hot = _hot_genes(codec, x, best.bottleneck)
            firsts = [(i, p) for i in hot for p in range(codec.upper[i] + 1) if p != x[i]]
            for k in rng.permutation(len(firsts)):
                i, p = firsts[k]
                pu = codec.pus[_network_of(codec, i)][p]
                seconds = [(m, q) for m in _hot_genes(codec, x, ("pu", pu)) if m != i
                           for q in range(codec.upper[m] + 1) if codec.pus[_network_of(codec, m)][q] != pu]
                for k2 in rng.permutation(len(seconds))[:EJECTIONS]:
                    m, q = seconds[k2]
                    y = x.copy()
                    y[i], y[m] = p, q
                    if better(y):
                        found = y
                        break
                if found is not None:
                    break
        if found is None:
            return x
        x = codec.repair(found)
        best = scorer.score(x)


def seed_plans(problem: MultiProblem, objective: str, deadline: Deadline) -> list[JointPlan]:
    """The baselines' joint plans (those ``deadline`` leaves time for; alone-best-pu first,
    which costs no search)."""
    found = [alone_best_pu_plan(problem)]
    try:
        found.append(npu_only_plan(problem))
    except ValueError:               # no NPU, or a network it cannot run
        pass
    try:
        plan, _ = own_optimum_plan(problem, deadline)
        found.append(plan)
        plan, _, _ = greedy_partition_plan(problem, objective, deadline)
        if plan is not None:
            found.append(plan)
    except OutOfTime:
        pass
    return found


def mixed_seeds(codec: JointCodec, plans: list[JointPlan], count: int) -> list[np.ndarray]:
    """The first ``count`` distinct genes of the plans, then of their mixes network by network
    (each network's part taken from any of the plans, in ``itertools.product``'s order). There
    are up to len(plans) ** networks mixes, so only those a population takes are built; each
    network's parts are distinct, so every mix is a new vector and the walk ends after at most
    ``count`` of them."""
    vectors = [codec.encode(p) for p in plans]
    parts = [list({codec.part(x, j).tobytes(): codec.part(x, j) for x in vectors}.values())
             for j in range(len(codec.pus))]
    out: dict[bytes, np.ndarray] = {}
    for x in itertools.chain(vectors, map(np.concatenate, itertools.product(*parts))):
        out.setdefault(x.tobytes(), x)
        if len(out) == count:
            break
    return list(out.values())


def same_genes():
    """pymoo's duplicate elimination by genes (integers), the first of equal plans kept, as its
    default marks them; the default compares every pair of plans (cdist), quadratic in the
    population: pop_size 12,000 had held 2.4 GB and run 9.5 s past a 0.5-s limit, 100,000 asked
    for 74.5 GiB. pymoo is imported here so that the registry loads without it."""
    from pymoo.core.duplicate import DuplicateElimination

    class SameGenes(DuplicateElimination):
        def _do(self, pop, other, is_duplicate):
            seen = set() if other is None else {np.asarray(o.X, dtype=np.int64).tobytes() for o in other}
            for i, ind in enumerate(pop):
                genes = np.asarray(ind.X, dtype=np.int64).tobytes()
                if genes in seen:
                    is_duplicate[i] = True
                else:
                    seen.add(genes)
            return is_duplicate

    return SameGenes()


def _nsga2(codec: JointCodec, scorer: JointScorer, initial: np.ndarray, pop_size: int, deadline: Deadline):
    """pymoo's NSGA-II on one objective and one constraint (the violation), with the operators
    of the module docstring; pymoo is imported here so that the registry loads without it."""
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.core.mutation import Mutation
    from pymoo.core.problem import Problem
    from pymoo.core.repair import Repair
    from pymoo.operators.crossover.pntx import TwoPointCrossover

    class JointMOP(Problem):
        def _evaluate(self, X, out, *args, **kwargs):
            scores = []
            for x in X:
                deadline.check()
                scores.append(scorer.score(x))
            out["F"] = np.array([[sc.fitness()] for sc in scores])
            out["G"] = np.array([[sc.violation] for sc in scores])

    class JointRepair(Repair):
        def _do(self, problem, X, **kwargs):
            return np.array([codec.repair(x) for x in X])

    class RunMutation(Mutation):
        def _do(self, problem, X, random_state=None, **kwargs):
            return np.array([_mutate(codec, x, random_state) for x in X])

    mop = JointMOP(n_var=len(codec.upper), n_obj=1, n_ieq_constr=1, xl=0, xu=codec.upper, vtype=int)
    algorithm = NSGA2(pop_size=pop_size, sampling=initial, crossover=TwoPointCrossover(), mutation=RunMutation(),
                      repair=JointRepair(), eliminate_duplicates=same_genes())
    return mop, algorithm


def _round(codec: JointCodec, scorer: JointScorer, seeds: list[np.ndarray], rng: np.random.Generator, stats: dict,
           *, pop_size: int, generations: int, seed: int, cap: int | None, deadline: Deadline) -> None:
    """One round: NSGA-II from the seeds and random plans, for ``GA_SHARE`` of the round's work
    (``cap``: the archive's size at its end) and time or until ``STALL`` generations in a row
    find no better plan (the population has converged), then the local search from the archive's best plans, then kicks (a mutation and a local
    search from the best plan) until ``PATIENCE`` kicks in a row find nothing better. Raises OutOfTime / OutOfWork when
    ``deadline`` / ``cap`` ends the round.

    The rounds do not pass their best plans on: a population seeded with them falls back into
    their basin, and independent rounds find better plans for the same work (on the Khadas
    pairs one round of the whole work limit misses the best plan known more often than three
    rounds of a third). The archive is shared, so the final plan is the best of all rounds."""
    used = len(scorer.scores)
    randoms = []
    for k in range(pop_size - len(seeds)):     # 100,000 plans had taken 7 s past a 0.5-s limit
        if k % 1000 == 0:
            deadline.check()
        randoms.append(_random_plan(codec, rng))
    initial = np.array(seeds + randoms)
    scorer.max_evaluations = None if cap is None else used + int((cap - used) * GA_SHARE)
    t = deadline.remaining()
    ga_deadline = Deadline(None if t is None else t * GA_SHARE)
    try:
        mop, algorithm = _nsga2(codec, scorer, initial, pop_size, ga_deadline)
        algorithm.setup(mop, termination=("n_gen", generations), seed=seed, verbose=False)
        best, stall = None, 0
        while algorithm.has_next() and stall < STALL:
            algorithm.next()
            stats["generations_run"] += 1
            ga_deadline.check()
            top = min(scorer.scores[scorer.key(x)].rank() for x in algorithm.pop.get("X"))
            best, stall = (top, 0) if best is None or top < best else (best, stall + 1)
    except (OutOfTime, OutOfWork):     # the search's share is spent
        deadline.check()
    scorer.max_evaluations = cap
    starts = scorer.ranked()[:POLISH_STARTS]
    best = scorer.genes(starts[0])
    for key in starts:
        best = min(best, polish(codec, scorer, scorer.genes(key), rng, deadline), key=lambda x: scorer.score(x).rank())
        stats["polished"] += 1
    idle = 0
    while idle < PATIENCE:
        y = polish(codec, scorer, codec.repair(_mutate(codec, best, rng)), rng, deadline)
        stats["polished"] += 1
        idle += 1
        if scorer.score(y).rank() < scorer.score(best).rank():
            best, idle = y, 0


@register("multi", "nsga2", exact=False, requires=("pymoo",),
          description="NSGA-II (pymoo) over joint chain plans, seeded with the baselines")
def solve_nsga2(problem: MultiProblem, *, objective: MultiAxis = "fairness", time_limit: float | None = None,
                seed: int = 0, max_evaluations: int | None = 30000, pop_size: int = 100, generations: int = 1000,
                shared_pus: bool = False):
    """One thread. ``max_evaluations``: the most distinct joint plans scored (the work limit;
    None: only ``generations`` and the time limit stop the run). ``generations``: the most
    generations of each round's NSGA-II. ``shared_pus``: let a PU hold several stages of a
    network (module docstring)."""
    if max_evaluations is not None and (isinstance(max_evaluations, bool) or not isinstance(max_evaluations, int)
                                        or max_evaluations < 1):
        raise ValueError(f"max_evaluations must be an integer >= 1, got {max_evaluations!r}")
    if isinstance(pop_size, bool) or not isinstance(pop_size, int) or pop_size < 2:
        raise ValueError(f"pop_size must be an integer >= 2, got {pop_size!r}")
    check_objective(problem, objective)
    search = Deadline(None if time_limit is None else max(0.0, time_limit - RESCORE_S))
    if not isinstance(shared_pus, bool):
        raise ValueError(f"shared_pus must be true or false, got {shared_pus!r}")
    codec = JointCodec(problem, shared_pus)
    scorer = JointScorer(codec, objective, max_evaluations)
    left = search.remaining()
    baselines = seed_plans(problem, objective, Deadline(None if left is None else left / 2))
    seeds = mixed_seeds(codec, baselines, pop_size)
    rng = np.random.default_rng(seed)
    stats = {"generations_run": 0, "polished": 0}
    stopped_by, reached = None, False
    try:
        for plan in baselines:
            scorer.score(codec.encode(plan), force=True)
    except BoundReached:
        reached = True
    for r in range(0 if reached else ROUNDS):
        rounds_left = ROUNDS - r
        used = len(scorer.scores)
        cap = None if max_evaluations is None else used + max(0, max_evaluations - used) // rounds_left
        t = search.remaining()
        deadline = search if t is None or rounds_left == 1 else Deadline(t / rounds_left)
        try:
            _round(codec, scorer, seeds, rng, stats, pop_size=pop_size, generations=generations,
                   seed=seed * ROUNDS + r, cap=cap, deadline=deadline)
        except OutOfTime:
            if search.expired():
                stopped_by = "time"
                break
        except OutOfWork:
            if len(scorer.scores) >= max_evaluations:
                stopped_by = "work"
                break
        except BoundReached:
            reached = True
            break

    key = scorer.ranked()[0]
    violation = scorer.scores[key].violation
    plan = codec.joint_plan(scorer.genes(key))
    params = {"pop_size": pop_size, "generations": generations, **stats, "max_evaluations": max_evaluations,
              "evaluations": len(scorer.scores), "seed": seed, "shared_pus": shared_pus}
    note = "reached the analytic bound: optimal" if reached else \
        stop_note(stopped_by, f"{stats['generations_run']} generations, {stats['polished']} local searches")
    termination = Termination.COMPLETED if stopped_by is None else Termination.TIME_LIMIT
    if violation > 0:
        try:
            evaluate_joint(problem, plan)
            why = ""
        except InfeasiblePlan as exc:
            why = str(exc)
        return SolveResult("multi", problem.name, "nsga2", termination, Quality.NONE,
                           params={"objective": objective, **params}, stopped_by=stopped_by,
                           message="; ".join(filter(None, [f"no feasible plan among {len(scorer.scores)} "
                                                           f"evaluated; the nearest: {why}", note])))
    return scored_joint_result(problem, "nsga2", plan, objective=objective, termination=termination, params=params,
                               message="; ".join(filter(None, [f"{len(scorer.scores)} joint plans evaluated", note])),
                               stopped_by=stopped_by)
