"""NSGA-II (pymoo) over the mapping plan space: a Pareto front of two or three of period,
latency, energy per frame and steady-state energy.

Genotype: two integer genes per unit, interleaved (stage, PU) in unit order, so that point
crossover exchanges whole ranges of units; with ``dvfs`` a third, the unit's DVFS level
(stage, PU, level), so that the search trades frequency against period and energy (a slower
level on a stage that is not the bottleneck often saves energy at no cost in period). Any gene
vector decodes to a feasible plan through
:meth:`GeneCodec.repair`, which pymoo applies as a Repair operator: the repaired genes are
written back into the population, so the search works on feasible genotypes only. Every plan
is scored by the evaluator. Besides the population, every evaluated plan feeds an archive, and
the returned front is the non-dominated set of that archive.

The time limit covers seeding (at most half of it), the search and the final scoring: seeds,
repairs and evaluations check the deadline one by one, so that on large graphs, where one
evaluation takes a noticeable time, the run stops inside a generation, even the first, with
the archive so far (at least the first seed).

``max_evaluations`` is the work limit: the run stops when it would score one more distinct plan
than that (plans met again come from the archive and cost no evaluation), inside a generation
if need be; ``generations`` bounds the generations as before (a run that ends them is
``completed``). With the same seed a run the work limit stops returns the same front on any
machine load, the time limit being the safety net; ``SolveResult.stopped_by`` says which limit
stopped a run.
"""
from __future__ import annotations

import numpy as np

from pipeplan.core.deadline import Deadline, OutOfTime
from pipeplan.core.registry import register
from pipeplan.core.result import Termination, stop_note
from pipeplan.core.vocabulary import MAPPING_AXES as OBJECTIVES
from pipeplan.core.vocabulary import MAPPING_KEYS as AXIS_KEYS
from pipeplan.core.vocabulary import MAPPING_TIE_BREAK, MappingAxis
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.formulations.mapping.pareto import non_dominated, rounded
from pipeplan.formulations.mapping.plan import Plan, plan_from_assignment, plan_from_dict
from pipeplan.formulations.mapping.problem import MappingProblem
from pipeplan.solvers.mapping.common import paced, scored_result, search_deadline
from pipeplan.solvers.mapping.warm_start import seed_plans

REPAIR_MEMO = 1 << 16  # repaired vectors remembered; the memo is emptied when full to bound memory


def runnable_levels(problem: MappingProblem, i: int, pu: str) -> tuple[str, ...]:
    """The DVFS levels of ``pu`` (slowest first) that the profile fully describes for unit
    ``i``: a time, a power figure where the PU has any, and for the first (last) unit the input
    (output) phase where the PU has one. A level missing from a table would otherwise score
    as free (no power, no input phase), which a search would exploit. The top level always
    stays (the plan every other solver makes)."""
    prof = problem.profile
    top = prof.pus[pu].max_level
    power = prof.power_mw.get(pu, {})
    phases = ([prof.input_stage.get(pu)] if i == 0 else []) + \
             ([prof.output_stage.get(pu)] if i == len(problem.units) - 1 else [])

    def described(lv: str) -> bool:
        return (prof.time_ms[pu].get(lv, (None,) * (i + 1))[i] is not None
                and (not power or power.get(lv, (None,) * (i + 1))[i] is not None)
                and all(lv in ph for ph in phases if ph))

    return tuple(lv for lv in prof.pus[pu].levels if lv == top or described(lv))


class GeneCodec:
    """Gene vectors <-> plans of one problem, with the repair that makes any vector feasible.

    Genes ``x[w i]`` (stage, in ``[0, S)``) and ``x[w i + 1]`` (PU index, in ``[0, k)``) belong
    to unit ``i``; S is the number of PUs (or ``max_stages`` if smaller), the most stages
    disjoint PU sets allow. With ``dvfs`` (w = 3) ``x[3i + 2]`` is the unit's level on a common
    scale ``[0, R)``, R the most levels any (unit, PU) has: it maps *by rank* to the levels of
    whatever PU the unit ends up on (level ``floor(g m / R)`` of the m it can run at there), so
    a unit moved to another PU keeps its relative speed, and repair rewrites the gene to the
    least value of its level (idempotent). Without ``dvfs`` (w = 2) every unit runs at its
    PU's top level.
    """

    def __init__(self, problem: MappingProblem, max_stages: int | None = None, dvfs: bool = False):
        self.problem = problem
        self.names = tuple(u.name for u in problem.units)
        self.pus = problem.pu_names
        prof = problem.profile
        n, k = len(self.names), len(self.pus)
        # time[i, p] at the PU's top level; inf where the unit cannot run
        self.time = np.array([[t if (t := prof.time(i, p, prof.pus[p].max_level)) is not None else np.inf
                               for p in self.pus] for i in range(n)])
        stuck = [self.names[i] for i in range(n) if not np.isfinite(self.time[i]).any()]
        if stuck:
            raise ValueError(f"units no PU can run: {', '.join(stuck[:5])}")
        self.preds = [[problem.index[e.src] for e in problem.preds[u]] for u in self.names]
        self.n_stages = min(max_stages or k, k)
        self.width = 3 if dvfs else 2
        # levels[i][p]: the levels unit i can run at on PU p (slowest first); [top] without dvfs
        self.levels = [[runnable_levels(problem, i, p) if dvfs else (prof.pus[p].max_level,) for p in self.pus]
                       for i in range(n)]
        self.rank = max(len(lv) for row in self.levels for lv in row)
        self.upper = np.tile([self.n_stages - 1, k - 1, self.rank - 1][:self.width], n)
        # genes are stage, PU and level indices: bytes when they fit, for compact memo and archive keys
        self.dtype = np.int8 if self.upper.max() < 128 else np.int16
        self._repaired: dict[bytes, bytes] = {}  # gene vector -> repaired, both as ``dtype`` bytes

    def key(self, genes) -> bytes:
        """A repaired gene vector as a dictionary key (``genes`` inverts it)."""
        return np.asarray(genes).astype(self.dtype).tobytes()

    def genes(self, key: bytes) -> np.ndarray:
        return np.frombuffer(key, dtype=self.dtype).astype(np.int64)

    def repair(self, genes) -> np.ndarray:
        """The feasible gene vector closest (by the rules below) to ``genes``; idempotent.

        1. Stages: unit 0 in stage 0, each unit in at least the stage of its predecessors
           (units are in topological order), stage numbers compacted to 0..m-1.
        2. PUs, until settled: a PU used by several stages stays with the stage holding most of
           its work; a unit on a PU it cannot run or that its stage lost moves to the fastest
           PU its stage owns that can run it, else to the fastest free PU that can, else its
           stage merges into the previous one (stage 0 absorbs stage 1) and PUs settle again.
        3. Levels (``dvfs``): each level gene maps by rank onto the levels of the unit's PU and
           becomes the least gene of that level.

        Memoised: once the population converges, pymoo's mating loop redraws the same vectors
        many times while it looks for offspring that are not duplicates.
        """
        genes = np.clip(np.asarray(genes, dtype=np.int64), 0, self.upper)
        key = self.key(genes)
        fixed = self._repaired.get(key)
        if fixed is None:
            w = self.width
            stage = self._monotone_stages(genes[0::w])
            pu = genes[1::w].copy()
            while (merge := self._settle_pus(stage, pu)) is not None:
                stage[stage >= merge] -= 1
            out = np.empty_like(genes)
            out[0::w], out[1::w] = stage, pu
            if w == 3:
                out[2::3] = [self._level_gene(i, p, self._level_index(i, p, g))
                             for i, (p, g) in enumerate(zip(pu, genes[2::3]))]
            if len(self._repaired) >= REPAIR_MEMO:
                self._repaired.clear()
            fixed = self._repaired[key] = self.key(out)
        return self.genes(fixed)

    def _level_index(self, i: int, p: int, gene: int) -> int:
        """Index into ``levels[i][p]`` of a level gene: by rank on the common scale."""
        return int(gene) * len(self.levels[i][p]) // self.rank

    def _level_gene(self, i: int, p: int, index: int) -> int:
        """The least level gene that maps to ``levels[i][p][index]``."""
        return -(-index * self.rank // len(self.levels[i][p]))

    def _monotone_stages(self, wanted: np.ndarray) -> np.ndarray:
        stage = np.zeros(len(wanted), dtype=np.int64)
        for i in range(1, len(wanted)):
            stage[i] = max([int(wanted[i])] + [stage[p] for p in self.preds[i]])
        return np.unique(stage, return_inverse=True)[1].astype(np.int64)

    def _settle_pus(self, stage: np.ndarray, pu: np.ndarray) -> int | None:
        """Make ``pu`` runnable and the stages' PU sets disjoint in place; returns the stage to
        merge into its predecessor when some unit finds no PU, else None."""
        runnable = np.isfinite(self.time[np.arange(len(pu)), pu])
        owner: dict[int, int] = {}
        for p in range(len(self.pus)):
            on_p = runnable & (pu == p)
            if on_p.any():
                work = np.bincount(stage[on_p], weights=self.time[on_p, p])
                owner[p] = int(np.argmax(work))  # ties: the earliest stage
        for i in np.flatnonzero(~runnable | np.array([owner.get(p) != s for p, s in zip(pu, stage)])):
            s = int(stage[i])
            choices = [p for p, o in owner.items() if o == s and np.isfinite(self.time[i, p])]
            if not choices:
                choices = [p for p in range(len(self.pus)) if p not in owner and np.isfinite(self.time[i, p])]
            if not choices:
                return max(s, 1)
            pu[i] = min(choices, key=lambda p: (self.time[i, p], p))
            owner[int(pu[i])] = s
        return None

    def plan(self, genes) -> Plan:
        """The plan of a repaired gene vector; units run in unit (topological) order on each PU.
        ``levels`` names the units below their PU's top level (the rest run at the top)."""
        w = self.width
        stage_of = {u: int(s) for u, s in zip(self.names, genes[0::w])}
        pu_of = {u: self.pus[int(p)] for u, p in zip(self.names, genes[1::w])}
        levels = {}
        if w == 3:
            for i, (u, p, g) in enumerate(zip(self.names, genes[1::3], genes[2::3])):
                level = self.levels[i][p][self._level_index(i, p, g)]
                if level != self.problem.profile.pus[self.pus[p]].max_level:
                    levels[u] = level
        return plan_from_assignment(self.names, stage_of, pu_of, levels=levels, instance=self.problem.name)

    def encode(self, plan: Plan) -> np.ndarray:
        """Genes of ``plan`` (repaired: a plan outside the gene space maps to a nearby one; a
        level the unit cannot run at, to the top one)."""
        place = plan.placement()
        prof = self.problem.profile
        w = self.width
        genes = np.zeros(w * len(self.names), dtype=np.int64)
        for i, u in enumerate(self.names):
            s, pu = place[u]
            p = self.pus.index(pu)
            genes[w * i], genes[w * i + 1] = s, p
            if w == 3:
                runnable = self.levels[i][p]
                level = prof.level(pu, plan.levels.get(u, "max")) if pu in prof.pus else None
                index = runnable.index(level) if level in runnable else len(runnable) - 1
                genes[3 * i + 2] = self._level_gene(i, p, index)
        return self.repair(genes)


class OutOfWork(Exception):
    """The archive holds ``max_evaluations`` plans and was asked to score a new one."""


class Archive:
    """Every distinct plan the search meets, evaluated once: repaired genes -> evaluator
    objectives. With ``max_evaluations``, scoring a new plan beyond that many raises OutOfWork."""

    def __init__(self, codec: GeneCodec, objectives: tuple[str, ...], max_evaluations: int | None = None):
        self.codec = codec
        self.keys = [AXIS_KEYS[o] for o in objectives]
        self.scores: dict[bytes, dict[str, float]] = {}
        self.max_evaluations = max_evaluations

    def score(self, x, *, force: bool = False) -> list[float]:
        """``force``: score a new plan even past the work limit (the run's first seed)."""
        genes = self.codec.repair(x)
        key = self.codec.key(genes)
        if key not in self.scores:
            if not force and self.max_evaluations is not None and len(self.scores) >= self.max_evaluations:
                raise OutOfWork
            self.scores[key] = evaluate(self.codec.problem, self.codec.plan(genes)).objectives()
        return [self.scores[key][k] for k in self.keys]

    def front(self) -> list[tuple[tuple[float, ...], bytes]]:
        """Non-dominated points (lexicographic order), each with the first plan that reached it."""
        first: dict[tuple[float, ...], bytes] = {}
        for key, objs in self.scores.items():
            first.setdefault(rounded([objs[k] for k in self.keys]), key)
        return [(point, first[point]) for point in non_dominated(first)]


def _nsga2(archive: Archive, initial: np.ndarray, pop_size: int, deadline: Deadline):
    """pymoo's NSGA-II on the archive's problem: two-point crossover, the reset mutation below
    and the codec's repair; evaluations and repairs raise OutOfTime past ``deadline``. pymoo is
    imported here, not with the module, so that the registry loads without it and reports the
    solver unavailable instead."""
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.core.mutation import Mutation
    from pymoo.core.problem import Problem
    from pymoo.core.repair import Repair
    from pymoo.operators.crossover.pntx import TwoPointCrossover

    codec = archive.codec

    class MappingMOP(Problem):
        def _evaluate(self, X, out, *args, **kwargs):
            out["F"] = np.array([archive.score(x) for x in paced(X, deadline)], dtype=float)

    class GeneRepair(Repair):
        def _do(self, problem, X, **kwargs):
            return np.array([codec.repair(x) for x in paced(X, deadline)])

    class ResetMutation(Mutation):
        """Each gene is redrawn uniformly within its bounds with probability 1/n_var (PU genes
        are categorical, so a redraw suits them better than a polynomial step)."""

        def _do(self, problem, X, random_state=None, **kwargs):
            xl, xu = problem.bounds()
            hit = random_state.random(X.shape) < 1.0 / problem.n_var
            return np.where(hit, random_state.integers(xl, xu + 1, size=X.shape), X)

    problem = MappingMOP(n_var=len(codec.upper), n_obj=len(archive.keys), xl=0, xu=codec.upper, vtype=int)
    algorithm = NSGA2(pop_size=pop_size, sampling=initial, crossover=TwoPointCrossover(),
                      mutation=ResetMutation(), repair=GeneRepair(), eliminate_duplicates=True)
    return problem, algorithm


def _check_objectives(objectives) -> tuple[str, ...]:
    objectives = tuple(objectives)
    if not 2 <= len(objectives) <= 3 or len(set(objectives)) != len(objectives) \
            or any(o not in OBJECTIVES for o in objectives):
        raise ValueError(f"objectives must be two or three distinct of {', '.join(OBJECTIVES)}; got {objectives}")
    return objectives


def _initial_genes(codec: GeneCodec, archive: Archive, problem: MappingProblem, *, pop_size: int, seed: int,
                   warm_start, max_stages: int | None, deadline: Deadline) -> np.ndarray:
    """The heuristics' plans (and ``warm_start``) as genes, topped up with random vectors; the
    seeds ``deadline`` leaves time for, HEFT's (else the fastest PU's) in any case. The first
    seed is scored into the archive whatever the time, so that the run always has a plan."""
    warm = plan_from_dict(warm_start) if isinstance(warm_start, dict) else warm_start
    seeded = [codec.encode(p) for p in ([warm] if warm is not None else []) + seed_plans(problem, deadline, max_stages)]
    archive.score(seeded[0], force=True)
    rng = np.random.default_rng(seed)
    randoms = rng.integers(0, codec.upper + 1, size=(max(0, pop_size - len(seeded)), len(codec.upper)))
    return np.vstack(seeded + [randoms])


@register("mapping", "nsga2", exact=False, requires=("pymoo",),
          description="NSGA-II (pymoo): Pareto front of 2-3 of period / latency / energy / energy_ss; DVFS with dvfs")
def solve_nsga2(problem: MappingProblem, *, time_limit: float | None = None, seed: int = 0,
                warm_start=None, objectives=None, objective: MappingAxis = "period", pop_size: int = 60,
                generations: int = 200, max_stages: int | None = None, max_evaluations: int | None = None,
                dvfs: bool = False):
    """One thread. ``objectives``: two or three distinct objectives (period, latency, energy,
    energy_ss); by default ``objective`` and its tie-break partner (period-latency,
    latency-period, energy-period, energy_ss-period); the returned plan is the front's best on
    the first. ``max_evaluations``: the most distinct plans the evaluator scores (the work
    limit; None: only ``generations`` and the time limit stop the run). ``dvfs``: search each
    unit's DVFS level too (seeds stay at the top level); otherwise every unit runs at its PU's
    top level, as with the other solvers."""
    if max_evaluations is not None and (isinstance(max_evaluations, bool) or not isinstance(max_evaluations, int)
                                        or max_evaluations < 1):
        raise ValueError(f"max_evaluations must be an integer >= 1, got {max_evaluations!r}")
    if not isinstance(dvfs, bool):
        raise ValueError(f"dvfs must be true or false, got {dvfs!r}")
    search = search_deadline(time_limit, problem)
    if objectives is None:
        objectives = (objective, MAPPING_TIE_BREAK[objective])
    objectives = _check_objectives(objectives)
    codec = GeneCodec(problem, max_stages, dvfs)
    archive = Archive(codec, objectives, max_evaluations)
    left = search.remaining()
    initial = _initial_genes(codec, archive, problem, pop_size=pop_size, seed=seed, warm_start=warm_start,
                             max_stages=max_stages, deadline=Deadline(None if left is None else left / 2))
    stopped_by, generations_run = None, 0
    try:
        mop, algorithm = _nsga2(archive, initial, pop_size, search)
        algorithm.setup(mop, termination=("n_gen", generations), seed=seed, verbose=False)
        while algorithm.has_next():
            algorithm.next()
            generations_run += 1
            if search.expired():
                stopped_by = "time" if algorithm.has_next() else None
                break
    except OutOfTime:                    # inside a generation: the archive holds what it scored
        stopped_by = "time"
    except OutOfWork:                    # the same: the archive holds max_evaluations plans
        stopped_by = "work"

    front = archive.front()  # lexicographic: front[0] is best on the first objective, then the second
    best_key = front[0][1]
    plans = {key: codec.plan(codec.genes(key)) for _, key in front}
    result = scored_result(
        problem, "nsga2", plans[best_key], objective=objectives[0],
        termination=Termination.COMPLETED if stopped_by is None else Termination.TIME_LIMIT,
        params={"objectives": list(objectives), "pop_size": pop_size, "generations": generations,
                "generations_run": generations_run, "max_evaluations": max_evaluations,
                "evaluations": len(archive.scores), "max_stages": codec.n_stages, "dvfs": dvfs},
        message="; ".join(filter(None, [f"{len(front)} non-dominated plans from {len(archive.scores)} evaluated",
                                        stop_note(stopped_by, f"{generations_run} generations")])),
        stopped_by=stopped_by)
    result.front = [{"objectives": dict(archive.scores[key]),
                     "plan": {**plans[key].to_dict(), "instance": problem.name}} for _, key in front]
    return result
