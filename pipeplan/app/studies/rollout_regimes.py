"""Where FGD matters: a regime map of frontier-group dispatch against complete-group pipelining
(issue #17, point 2).

Regimes cross KV pressure (the KV tokens of the whole deployment), the length tail, data-parallel
replicas (the same GPUs split in two: KV and ``max_num_seqs`` halved per replica, behind a
router), the round size R, asynchrony (one on-policy round; several rounds at staleness 0 and 1)
and the engine's retract rule (SGLang: a retracted request rejoins the queue's tail; vLLM: its
head). Every policy runs on every regime; ``fgd-soft+prio`` is FGD-soft on the same engine with
``policy_victims`` and ``priority_preemption`` switched on (the other policies do not act on
those switches: their runs would be the same).

Every train end comes from ``pipeplan.solve`` (the simulator, re-scored by the checker). The
reference of a regime is the best schedule any solver found and the best valid lower bound the
results carry; single-round single-replica regimes also run the offline ``cpsat`` solver. The
"why" of each regime is derived from measured quantities of the CGP and FGD-soft schedules
(``mechanism``), re-simulated with the same policies (their train ends are checked equal).
"""
from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from statistics import mean

import pipeplan
from pipeplan.app.studies.rollout import _when
from pipeplan.core.io import staged_folder, write_atomic
from pipeplan.core.tables import cell, csv_text, markdown_table
from pipeplan.formulations.rollout.problem import RolloutProblem
from pipeplan.formulations.rollout.simulator import simulate
from pipeplan.formulations.rollout.workloads import K_PAPER, QWEN3_1_7B_2xA100, preset_round
from pipeplan.solvers.rollout.online import make_policy

POLICIES = ("sync", "cgp", "fgd-soft", "fgd-hard", "fifo", "longest-first", "shortest-first", "deadline", "slack")
PRIO = "fgd-soft+prio"
ALL_POLICIES = POLICIES + (PRIO,)
ASYNCS = ((1, 0), (4, 0), (4, 1))
KVS = (460_000, 120_000, 60_000)
TAILS = ("paper", "heavy", "pareto")
WINS = -0.05                 # FGD-soft "matters": at least 5% faster than CGP
FLAT = 0.015                 # the reproduction's band of FGD-soft - CGP with every feature off
EPS = 1e-9
MECHANISM = ("retractions", "retract_wait_s", "overtaken", "overtaken_later_round", "round_span_s", "backlog_s",
             "update_s", "late_groups", "bypass")
FILES = ("fgd_regimes.md", "fgd_regimes.csv", "fgd_regimes_heatmap.png", "fgd_regimes_replicas.png",
         "fgd_regimes_headline.png")


def _key(name: str) -> str:
    return name.replace("-", "_").replace("+", "_")


@dataclass(frozen=True)
class Regime:
    """One cell of the map. ``kv_tokens`` is the KV of the whole deployment: each of the
    ``replicas`` holds ``kv_tokens // replicas`` and runs ``max_num_seqs // replicas``."""

    R: int
    kv_tokens: int
    tail: str = "paper"
    rounds: int = 1
    staleness: int = 0
    retract_rule: str = "sglang"
    replicas: int = 1
    router: str = "round_robin"

    @property
    def asynchrony(self) -> str:
        return "1 round" if self.rounds == 1 else f"{self.rounds} rounds, staleness {self.staleness}"

    @property
    def deployment(self) -> str:
        return "1 engine" if self.replicas == 1 else f"{self.replicas} x DP, {self.router}"

    @property
    def single(self) -> bool:
        """One round on one engine: where the offline solver applies."""
        return self.rounds == 1 and self.replicas == 1

    @property
    def label(self) -> str:
        return (f"R{self.R} kv{self.kv_tokens // 1000}k {self.tail} {self.asynchrony} {self.retract_rule} "
                f"{self.deployment}")

    def engine(self, prio: bool = False, base=QWEN3_1_7B_2xA100):
        return dataclasses.replace(base, kv_capacity_tokens=self.kv_tokens // self.replicas,
                                   max_num_seqs=base.max_num_seqs // self.replicas, replicas=self.replicas,
                                   router=self.router, retract_rule=self.retract_rule,
                                   policy_victims=prio, priority_preemption=prio)

    def problem(self, workload: str, seed: int, prio: bool = False) -> RolloutProblem:
        return preset_round(workload, self.R, seed=seed, engine=self.engine(prio), tail=self.tail, rounds=self.rounds)


def default_regimes(*, Rs=(32, 64), kvs=KVS, tails=TAILS, asyncs=ASYNCS, rules=("sglang", "vllm"),
                    replica_Rs=(32,), replica_kvs=(120_000, 60_000),
                    routers=("round_robin", "group_affinity")) -> list[Regime]:
    """The map: one engine over R x KV x tail x asynchrony x retract rule, and two replicas
    (the same GPUs split data-parallel) over ``replica_Rs`` x ``replica_kvs`` x tail x
    asynchrony x rule x router. Two replicas at full KV behave like one engine (no
    retractions: nothing for FGD to do), so ``replica_kvs`` leaves it out by default."""
    out = [Regime(R, kv, tail, rounds, st, rule) for R in Rs for kv in kvs for tail in tails
           for rounds, st in asyncs for rule in rules]
    out += [Regime(R, kv, tail, rounds, st, rule, 2, router) for R in replica_Rs for kv in replica_kvs
            for tail in tails for rounds, st in asyncs for rule in rules for router in routers]
    return out


# -- what the schedules show ----------------------------------------------------------------
def mechanism(problem: RolloutProblem, schedule, staleness: int = 0, frontier: int = 2) -> dict:
    """Measured quantities of one schedule that explain an admission policy's effect.

    * ``retract_wait_s``: mean time from a retraction to the request's re-admission;
      ``overtaken``: share of retractions after which a request of a later group was admitted
      on the same replica before the retracted request came back (``overtaken_later_round``:
      a request of a later round).
    * ``round_span_s``: mean over rounds of the round's release to its last group's completion.
    * ``backlog_s``: mean over rounds of the trainer's work left when the round's last group
      completes (its last update's end - that completion); ``update_s``: the mean update. A
      backlog of one or two updates means the trainer keeps up: completing groups earlier
      cannot end the round sooner, only a shorter rollout can.
    * ``late_groups``: mean share of a round's groups completing in the last 20% of its span.
    * ``bypass``: share of admissions of a non-frontier request while a request of the frontier
      (the ``frontier`` lowest-numbered unfinished groups) waited on the same replica and stayed
      waiting: what FGD-soft would have admitted instead.
    """
    K, per, n = problem.K, problem.groups_per_round * problem.K, problem.n_requests
    pubs = schedule.publishes
    release = [0.0 if r < 1 + staleness else pubs[r - 1 - staleness][1] for r in range(problem.rounds)]
    stays = defaultdict(list)
    for s in schedule.segments:
        stays[s.request].append(s)
    replica = [stays[i][0].replica for i in range(n)]
    positions = defaultdict(list)                      # request -> its admissions' places in the list
    for k, (i, _) in enumerate(schedule.admissions):
        positions[i].append(k)
    times = [t for _, t in schedule.admissions]
    # waits: (start time, place of the admission that ends it) per request
    waits = [[] for _ in range(n)]
    over = over_round = 0
    retract_waits = []
    for i in range(n):
        ss = sorted(stays[i], key=lambda s: s.admit_s)
        waits[i].append((release[i // per], positions[i][0]))
        for j, (a, b) in enumerate(pairwise(ss), start=1):
            waits[i].append((a.end_s, positions[i][j]))
            retract_waits.append(b.admit_s - a.end_s)
            later = [x for x, _ in schedule.admissions[_first_at(times, a.end_s):positions[i][j]]
                     if replica[x] == replica[i] and x // K > i // K]
            over += bool(later)
            over_round += any(x // per > i // per for x in later)
    retracted = len(retract_waits)
    # per round: span, the trainer's work left at its last completion, the groups that complete late
    done, gper = schedule.group_complete_s, problem.groups_per_round
    spans, backlog, late = [], [], []
    for r in range(problem.rounds):
        gs = range(r * gper, (r + 1) * gper)
        last = max(done[g] for g in gs)
        spans.append(last - release[r])
        backlog.append(max(u.end_s for u in schedule.updates if u.groups[0] // gper == r) - last)
        cut = release[r] + 0.8 * (last - release[r])
        late.append(sum(done[g] > cut + EPS for g in gs) / gper)
    # frontier bypass
    low, bypass = 0, 0
    for k, (i, t) in enumerate(schedule.admissions):
        while low < problem.R and done[low] <= t + EPS:
            low += 1
        front, g = [], low
        while g < problem.R and len(front) < frontier:
            if done[g] > t + EPS:
                front.append(g)
            g += 1
        if i // K in front:
            continue
        bypass += any(replica[j] == replica[i] and any(start <= t + EPS and end > k for start, end in waits[j])
                      for g in front for j in problem.group_requests(g))
    return {"retractions": schedule.retractions, "retract_wait_s": mean(retract_waits) if retract_waits else 0.0,
            "overtaken": over / retracted if retracted else 0.0,
            "overtaken_later_round": over_round / retracted if retracted else 0.0,
            "round_span_s": mean(spans), "backlog_s": mean(backlog),
            "update_s": mean(u.end_s - u.start_s for u in schedule.updates), "late_groups": mean(late),
            "bypass": bypass / len(schedule.admissions)}


def _first_at(times: list[float], t: float) -> int:
    """The first place in the (time-sorted) admissions at or after t."""
    lo, hi = 0, len(times)
    while lo < hi:
        mid = (lo + hi) // 2
        if times[mid] < t - EPS:
            lo = mid + 1
        else:
            hi = mid
    return lo


# -- running one regime ---------------------------------------------------------------------
def _checked(r, what: str) -> dict:
    if not r.objectives:
        raise RuntimeError(f"{what}: no checked schedule ({r.termination.value}: {r.message})")
    o = r.objectives
    return {"train_end_s": o["train_end_s"], "bound_s": r.bound["train_end_s"], "retractions": o["retractions"],
            "waiting_ratio": o["waiting_ratio"], "solver": r.solver}


def run_seed(workload: str, regime: Regime, seed: int, frontier: int = 2) -> dict:
    """Every policy on one seed of a regime (through ``pipeplan.solve``), and the mechanism of
    the CGP and FGD-soft schedules."""
    p, pp = regime.problem(workload, seed), regime.problem(workload, seed, prio=True)
    st = {"staleness": regime.staleness} if regime.staleness else {}
    out = {}
    for name in ALL_POLICIES:
        base = "fgd-soft" if name == PRIO else name
        extra = {"frontier": frontier} if base.startswith("fgd") else {}
        out[name] = _checked(pipeplan.solve(pp if name == PRIO else p, base, **st, **extra), f"{name} on {p.name}")
    mech = {}
    for name, problem in (("cgp", p), ("fgd-soft", p), (PRIO, pp)):
        base = "fgd-soft" if name == PRIO else name
        schedule = simulate(problem, make_policy(base, regime.staleness, **({"frontier": frontier}
                                                                             if base.startswith("fgd") else {})))
        end = schedule.metrics()["train_end_s"]
        if abs(end - out[name]["train_end_s"]) > 1e-6 * max(1.0, end):
            raise RuntimeError(f"{name} on {p.name}: re-simulated train end {end} != checked {out[name]['train_end_s']}")
        mech[name] = mechanism(problem, schedule, regime.staleness, frontier)
    return {"seed": seed, "results": out, "mechanism": mech}


def run_cpsat(workload: str, regime: Regime, seed: int, time_limit: float, threads: int) -> dict:
    p = regime.problem(workload, seed)
    return _checked(pipeplan.solve(p, "cpsat", time_limit=time_limit, threads=threads, seed=seed), f"cpsat on {p.name}")


def _task(args):
    kind, *rest = args
    return run_seed(*rest) if kind == "seed" else run_cpsat(*rest)


def regime_map(regimes: list[Regime] | None = None, *, workload: str = "lsat-ar", seeds: int = 2,
               heavy_seeds: int = 1, heavy_groups: int = 256, cpsat_seeds: int = 1, cpsat_time_limit: float = 10.0,
               cpsat_threads: int = 2, cpsat_rules=("sglang",), frontier: int = 2, workers: int = 1,
               progress=None) -> list[dict]:
    """One row per regime (``default_regimes()`` unless given): means over ``seeds`` rounds
    (``heavy_seeds`` where R x rounds >= ``heavy_groups``: the oracle ``deadline`` policy is
    quadratic in the groups). ``cpsat`` runs on the first ``cpsat_seeds`` seeds of the
    single-round single-replica regimes whose retract rule is in ``cpsat_rules``, after the
    policies (``workers`` processes run the policies; CP-SAT runs alone, on ``cpsat_threads``)."""
    regimes = list(default_regimes() if regimes is None else regimes)
    n_seeds = [heavy_seeds if g.R * g.rounds >= heavy_groups else seeds for g in regimes]
    jobs = [("seed", workload, g, s, frontier) for g, k in zip(regimes, n_seeds) for s in range(k)]
    cp_jobs = [("cpsat", workload, g, s, cpsat_time_limit, cpsat_threads) for g, k in zip(regimes, n_seeds)
               if g.single and g.retract_rule in cpsat_rules for s in range(min(k, cpsat_seeds))]
    total, done, t0 = len(jobs) + len(cp_jobs), 0, time.perf_counter()
    got: dict[tuple, dict] = {}

    def tick(job, res):
        nonlocal done
        got[(job[0], job[2], job[3])] = res
        done += 1
        if progress:
            progress(done, total, f"{job[0]} {job[2].label} seed {job[3]}")

    if workers > 1 and len(jobs) > 1:
        import multiprocessing as mp
        # a Pool, not a ProcessPoolExecutor: leaving the block by an exception (SIGTERM, Ctrl-C)
        # terminates the workers, where the executor would first run every job still queued.
        # Its workers are daemonic and may start no process: the online policies start none
        with mp.get_context("fork").Pool(workers) as pool:
            for job, res in zip(jobs, pool.imap(_task, jobs, chunksize=1)):
                tick(job, res)
    else:
        for job in jobs:
            tick(job, _task(job))
    for job in cp_jobs:
        tick(job, _task(job))
    wall = time.perf_counter() - t0
    rows = [_row(g, [got[("seed", g, s)] for s in range(k)], [got[("cpsat", g, s)] for s in range(k)
                                                               if ("cpsat", g, s) in got])
            for g, k in zip(regimes, n_seeds)]
    for r in rows:
        r["map_wall_s"] = wall
    if progress:
        progress(total, total, "done")
    return rows


def _row(g: Regime, runs: list[dict], cps: list[dict]) -> dict:
    row = {"regime": g.label, "R": g.R, "kv_tokens": g.kv_tokens, "kv_per_replica": g.kv_tokens // g.replicas,
           "tail": g.tail, "replicas": g.replicas, "router": g.router if g.replicas > 1 else "",
           "deployment": g.deployment, "rounds": g.rounds, "staleness": g.staleness, "asynchrony": g.asynchrony,
           "retract_rule": g.retract_rule, "seeds": len(runs), "requests": g.R * g.rounds * K_PAPER}
    ends = {n: [run["results"][n]["train_end_s"] for run in runs] for n in ALL_POLICIES}
    for n in ALL_POLICIES:
        row[f"train_end_{_key(n)}"] = mean(ends[n])

    def change(n):
        return [a / c - 1 for a, c in zip(ends[n], ends["cgp"])]

    soft = change("fgd-soft")
    row.update(fgd_soft_vs_cgp=mean(soft), fgd_soft_vs_cgp_min=min(soft), fgd_soft_vs_cgp_max=max(soft),
               fgd_hard_vs_cgp=mean(change("fgd-hard")), fgd_prio_vs_cgp=mean(change(PRIO)),
               fifo_vs_cgp=mean(change("fifo")))
    row["best_policy"] = min(ALL_POLICIES, key=lambda n: row[f"train_end_{_key(n)}"])
    best_online = [min(run["results"][n]["train_end_s"] for n in ALL_POLICIES) for run in runs]
    found, bounds, by_cpsat = [], [], 0
    for s, run in enumerate(runs):
        res = list(run["results"].values()) + ([cps[s]] if s < len(cps) else [])
        best = min(res, key=lambda r: r["train_end_s"])
        found.append(best["train_end_s"])
        by_cpsat += best["solver"] == "cpsat"
        bounds.append(max(r["bound_s"] for r in res))
    row.update(best_online_s=mean(best_online), best_found_s=mean(found), bound_s=mean(bounds),
               reference=f"cpsat ({len(cps)} of {len(runs)} seeds) + online" if cps else "online",
               cpsat_runs=len(cps), cpsat_best_seeds=by_cpsat,
               best_online_vs_best_found=mean(a / b for a, b in zip(best_online, found)),
               best_online_vs_bound=mean(a / b for a, b in zip(best_online, bounds)),
               waiting_ratio_cgp=mean(run["results"]["cgp"]["waiting_ratio"] for run in runs))
    for n, tag in (("cgp", "cgp"), ("fgd-soft", "fgd"), (PRIO, "prio")):
        for k in MECHANISM:
            row[_mk(k, tag)] = mean(run["mechanism"][n][k] for run in runs)
    row["why"] = why(row)
    return row


def _mk(k: str, tag: str) -> str:
    """The row key of mechanism quantity k for a policy tag (the unit stays last)."""
    return f"{k[:-2]}_{tag}_s" if k.endswith("_s") else f"{k}_{tag}"


def why(r: dict) -> str:
    """One line on why FGD-soft does (or cannot) beat CGP here, from the measured quantities."""
    d, ret, rule = r["fgd_soft_vs_cgp"], r["retractions_cgp"], r["retract_rule"]
    wait_c, wait_f = r["retract_wait_cgp_s"], r["retract_wait_fgd_s"]
    waits = f"{wait_c:.0f} s on average vs {wait_f:.0f} s under FGD"
    backlog = f"{r['backlog_cgp_s']:.0f} -> {r['backlog_fgd_s']:.0f} s"
    span = f"{r['round_span_cgp_s']:.0f} -> {r['round_span_fgd_s']:.0f} s"
    if d == 0 and ret <= 0.02 * r["requests"]:
        return (f"FGD-soft ends exactly as CGP: {ret:.0f} retractions only, and the frontier requests CGP passes over "
                f"({r['bypass_cgp']:.0%} of admissions, from the jittered arrival order) start within the same wave")
    if ret < 1:
        if r["bypass_cgp"] < 0.01:
            return ("no retractions and the frontier already runs (CGP passes a waiting frontier request in "
                    f"{r['bypass_cgp']:.1%} of admissions): nothing for FGD to reorder")
        return (f"no retractions: the frontier requests CGP passes over ({r['bypass_cgp']:.0%} of admissions, from "
                "the jittered arrival order) start within the same wave, so group completions hardly move")
    where = "tail" if rule == "sglang" else "head"
    behind = (f", {r['overtaken_later_round_cgp']:.0%} of them behind a later round's requests"
              if r["overtaken_later_round_cgp"] >= 0.005 else "")
    if d <= WINS:
        return (f"{rule} re-queues CGP's {ret:.0f} retracted requests at the {where}{behind}: they wait {waits}, "
                f"which re-admits the frontier first; trainer work left after each round's last group {backlog}, "
                f"round span {span}")
    if rule == "vllm" and wait_c <= 1.5 * wait_f:
        return (f"vLLM's rule puts CGP's {ret:.0f} retracted requests back at the queue head: they wait {waits}, "
                "so CGP already re-admits them first")
    if r["backlog_cgp_s"] <= 2.5 * r["update_cgp_s"]:
        return (f"rollout-bound: CGP's trainer ends each round {r['backlog_cgp_s']:.0f} s "
                f"({r['backlog_cgp_s'] / r['update_cgp_s']:.1f} updates) after its last group, so earlier group "
                f"completions cannot help; FGD cuts the {ret:.0f} retracted requests' wait ({waits}) but the round "
                f"span, set by engine throughput, moves {span}")
    if d > abs(WINS) / 5:
        return (f"FGD is slower: frontier-first admission makes {r['retractions_fgd']:.0f} retractions (CGP {ret:.0f}); "
                f"round span {span}, trainer work left after each round's last group {backlog}")
    return (f"FGD cuts the {ret:.0f} retracted requests' wait ({waits}) and the trainer work left after each "
            f"round's last group {backlog} (round span {span}): {_pc(d)}")


# -- reports --------------------------------------------------------------------------------
COLUMNS = ("regime", "R", "kv_tokens", "kv_per_replica", "tail", "replicas", "router", "rounds", "staleness",
           "asynchrony", "retract_rule", "seeds", "requests", *(f"train_end_{_key(n)}" for n in ALL_POLICIES),
           "fgd_soft_vs_cgp", "fgd_soft_vs_cgp_min", "fgd_soft_vs_cgp_max", "fgd_hard_vs_cgp", "fgd_prio_vs_cgp",
           "fifo_vs_cgp", "best_policy", "best_online_s", "best_found_s", "bound_s", "reference", "cpsat_runs",
           "cpsat_best_seeds",
           "best_online_vs_best_found", "best_online_vs_bound", "waiting_ratio_cgp",
           *(_mk(k, tag) for tag in ("cgp", "fgd", "prio") for k in MECHANISM), "why", "map_wall_s")


def _pc(x: float) -> str:
    return f"{100 * x:+.1f}%"


def headline(rows: list[dict]) -> dict:
    """The regime with the largest FGD-soft gain over CGP on one engine (ties: the first)."""
    one = [r for r in rows if r["replicas"] == 1] or rows
    return min(one, key=lambda r: r["fgd_soft_vs_cgp"])


def twin(rows: list[dict], r: dict, **change) -> dict | None:
    """The row of the same regime with ``change`` applied (e.g. retract_rule="vllm")."""
    keys = ("R", "kv_tokens", "tail", "replicas", "router", "rounds", "staleness", "retract_rule")
    want = {k: change.get(k, r[k]) for k in keys}
    return next((x for x in rows if all(x[k] == want[k] for k in keys)), None)


def _names(rows: list[dict]) -> str:
    return "; ".join(f"{r['regime']} ({_pc(r['fgd_soft_vs_cgp'])})" for r in rows)


def findings(rows: list[dict]) -> list[str]:
    """Headline bullets, every number from the rows."""
    out = []
    wins = sorted((r for r in rows if r["fgd_soft_vs_cgp"] <= WINS), key=lambda r: r["fgd_soft_vs_cgp"])
    sg = [r for r in rows if r["retract_rule"] == "sglang"]
    vl = [r for r in rows if r["retract_rule"] == "vllm"]
    out.append(f"- FGD-soft beats CGP by >= 5% (mean over seeds) in {len(wins)} of {len(rows)} regimes: "
               f"{sum(r['retract_rule'] == 'sglang' for r in wins)} of {len(sg)} under SGLang's retract rule, "
               f"{sum(r['retract_rule'] == 'vllm' for r in wins)} of {len(vl)} under vLLM's; "
               f"{sum(r['retractions_cgp'] >= 1 for r in wins)} of them retract under CGP (KV "
               f"{', '.join(f'{k // 1000}k' for k in sorted({r['kv_tokens'] for r in wins}, reverse=True))} tokens), "
               f"{sum(r['kv_tokens'] == max(x['kv_tokens'] for x in rows) for r in wins)} have the full KV." if wins else
               f"- FGD-soft beats CGP by >= 5% in none of the {len(rows)} regimes.")
    if wins:
        best = wins[0]
        out.append(f"- Largest gain: {best['regime']}: FGD-soft {_pc(best['fgd_soft_vs_cgp'])} vs CGP "
                   f"({best['train_end_cgp']:.0f} -> {best['train_end_fgd_soft']:.0f} s; seeds "
                   f"{100 * best['fgd_soft_vs_cgp_min']:+.1f}..{100 * best['fgd_soft_vs_cgp_max']:+.1f}%). "
                   f"Why: {best['why']}.")
        out.append(f"- Why, over the winning regimes: CGP retracts {mean(r['retractions_cgp'] for r in wins):.0f} "
                   f"requests per run and a retracted request waits {mean(r['retract_wait_cgp_s'] for r in wins):.0f} s "
                   f"to come back (FGD-soft {mean(r['retract_wait_fgd_s'] for r in wins):.0f} s); CGP passes over a "
                   f"waiting frontier request in {mean(r['bypass_cgp'] for r in wins):.0%} of its admissions; the "
                   f"trainer's work left after each round's last group falls from "
                   f"{mean(r['backlog_cgp_s'] for r in wins):.0f} to {mean(r['backlog_fgd_s'] for r in wins):.0f} s "
                   f"and the round span from {mean(r['round_span_cgp_s'] for r in wins):.0f} to "
                   f"{mean(r['round_span_fgd_s'] for r in wins):.0f} s.")
        late = [r for r in wins if r["overtaken_later_round_cgp"] >= 0.005]
        if late:
            out.append(f"- With staleness 1 the next round's requests are already queued: in {len(late)} winning "
                       f"regimes {mean(r['overtaken_later_round_cgp'] for r in late):.0%} of CGP's retracted "
                       f"requests come back only after a later round's requests (FGD-soft "
                       f"{mean(r['overtaken_later_round_fgd'] for r in late):.0%}).")
        pairs = [(a, twin(rows, a, retract_rule="vllm")) for a in wins if a["retract_rule"] == "sglang"]
        pairs = [(a, b) for a, b in pairs if b]
        if pairs:
            out.append(f"- The same {len(pairs)} regimes under vLLM's rule (retracted requests back at the queue head): "
                       f"FGD-soft vs CGP {_pc(mean(b['fgd_soft_vs_cgp'] for _, b in pairs))} on average (SGLang "
                       f"{_pc(mean(a['fgd_soft_vs_cgp'] for a, _ in pairs))}): CGP itself runs "
                       f"{_pc(mean(b['train_end_cgp'] / a['train_end_cgp'] - 1 for a, b in pairs))} vs its SGLang "
                       f"train end, and its retracted requests wait {mean(b['retract_wait_cgp_s'] for _, b in pairs):.0f}"
                       f" s instead of {mean(a['retract_wait_cgp_s'] for a, _ in pairs):.0f} s; FGD-soft under "
                       f"SGLang's rule vs CGP under vLLM's: "
                       f"{_pc(mean(a['train_end_fgd_soft'] / b['train_end_cgp'] - 1 for a, b in pairs))}. The tail "
                       "re-queue is the mechanism: FGD wins back (most of) what SGLang's rule loses.")
        prio = mean(r["fgd_prio_vs_cgp"] - r["fgd_soft_vs_cgp"] for r in wins)
        effect = ("change little" if abs(prio) < 0.01 else "help" if prio < 0 else "hurt")
        out.append(f"- There fifo (group-major priority; a retracted request keeps its place) gives "
                   f"{_pc(mean(r['fifo_vs_cgp'] for r in wins))} vs CGP, and FGD-soft with policy victims + priority "
                   f"preemption {_pc(mean(r['fgd_prio_vs_cgp'] for r in wins))} (FGD-soft alone "
                   f"{_pc(mean(r['fgd_soft_vs_cgp'] for r in wins))}): any order that puts the early groups' "
                   f"retracted requests first recovers the loss; the engine switches {effect} "
                   f"({100 * prio:+.1f} points on average).")
    same = [r for r in rows if r["why"].startswith("FGD-soft ends exactly") or r["retractions_cgp"] < 1]
    if same:
        kv = ", ".join(f"{k // 1000}k" for k in sorted({r["kv_tokens"] for r in same}, reverse=True))
        out.append(f"- Where it cannot, 1: {len(same)} regimes (KV {kv}) retract at most "
                   f"{max(r['retractions_cgp'] for r in same):.0f} requests under CGP; there FGD-soft - CGP lies in "
                   f"[{100 * min(r['fgd_soft_vs_cgp'] for r in same):+.2f}, "
                   f"{100 * max(r['fgd_soft_vs_cgp'] for r in same):+.2f}]%: requests arrive nearly group-major and "
                   "the frontier's requests start in the same wave.")
    press = [r for r in rows if r not in same and r["fgd_soft_vs_cgp"] > WINS]
    vll = [r for r in press if r["why"].startswith("vLLM")]
    bound = [r for r in press if r["why"].startswith("rollout-bound")]
    if vll:
        out.append(f"- Where it cannot, 2: {len(vll)} vLLM-rule regimes retract, but CGP's retracted requests come "
                   f"back at the queue head ({mean(r['retract_wait_cgp_s'] for r in vll):.0f} s wait on average, "
                   f"FGD-soft {mean(r['retract_wait_fgd_s'] for r in vll):.0f} s): FGD-soft vs CGP "
                   f"{_pc(mean(r['fgd_soft_vs_cgp'] for r in vll))} on average.")
    if bound:
        out.append(f"- Where it cannot, 3: {len(bound)} regimes retract but are rollout-bound: CGP's trainer ends each "
                   f"round {mean(r['backlog_cgp_s'] for r in bound):.0f} s after its last group (about "
                   f"{mean(r['backlog_cgp_s'] / r['update_cgp_s'] for r in bound):.1f} updates), so completing groups "
                   f"earlier cannot end a round sooner; FGD-soft still cuts the retracted requests' wait "
                   f"({mean(r['retract_wait_cgp_s'] for r in bound):.0f} -> "
                   f"{mean(r['retract_wait_fgd_s'] for r in bound):.0f} s) but the round span barely moves "
                   f"({mean(r['round_span_cgp_s'] for r in bound):.0f} -> {mean(r['round_span_fgd_s'] for r in bound):.0f}"
                   f" s): FGD-soft vs CGP {_pc(mean(r['fgd_soft_vs_cgp'] for r in bound))}. These are mostly the "
                   f"heavy and Pareto tails at staleness 0 or one round ({sum(r['tail'] != 'paper' for r in bound)} of "
                   f"{len(bound)}): long rounds in which the trainer catches up.")
    rest = [r for r in press if r not in vll and r not in bound]
    if rest:
        out.append(f"- The other {len(rest)} retracting regimes gain {_pc(mean(r['fgd_soft_vs_cgp'] for r in rest))} "
                   f"on average (range {100 * min(r['fgd_soft_vs_cgp'] for r in rest):+.1f}.."
                   f"{100 * max(r['fgd_soft_vs_cgp'] for r in rest):+.1f}%; see each row's why).")
    out.append(f"- FGD-hard (F_w = 2 groups) is {_pc(mean(r['fgd_hard_vs_cgp'] for r in rows))} vs CGP on average and "
               f"beats it in {sum(r['fgd_hard_vs_cgp'] < 0 for r in rows)} regimes: the gate starves the engine.")
    bests = {}
    for r in rows:
        bests[r["best_policy"]] = bests.get(r["best_policy"], 0) + 1
    out.append("- Best online policy per regime: " + ", ".join(f"{k} {v}" for k, v in
                                                                sorted(bests.items(), key=lambda kv: -kv[1])) + ".")
    near = [r["best_online_vs_best_found"] for r in rows]
    cp = [r for r in rows if r["reference"] != "online"]
    out.append(f"- Best online / best schedule found: {min(near):.3f}-{max(near):.3f} (CP-SAT found the best schedule "
               f"in {sum(r['cpsat_best_seeds'] > 0 for r in cp)} of the {len(cp)} regimes where it ran); best "
               f"online / best lower bound: {min(r['best_online_vs_bound'] for r in rows):.3f}-"
               f"{max(r['best_online_vs_bound'] for r in rows):.3f} (the bounds are loose under KV pressure and with "
               "several rounds).")
    return out


def _pivot(rows: list[dict], by_row: str, by_col: str, value: str = "fgd_soft_vs_cgp") -> list[str]:
    rk = list(dict.fromkeys(r[by_row] for r in rows))
    ck = list(dict.fromkeys(r[by_col] for r in rows))
    table = []
    for a in rk:
        line = [a]
        for b in ck:
            xs = [r[value] for r in rows if r[by_row] == a and r[by_col] == b]
            line.append(_pc(mean(xs)) if xs else "-")
        table.append(line)
    return markdown_table((by_row, *map(str, ck)), table)


def cp_note(rows: list[dict]) -> str:
    """Where CP-SAT ran, in words (e.g. "sglang rule, seed 0 of 2")."""
    ran = [r for r in rows if r["cpsat_runs"]]
    rules = "/".join(sorted({r["retract_rule"] for r in ran}))
    runs = sorted({f"{r['cpsat_runs']} of {r['seeds']}" for r in ran})
    return f"{len(ran)} regimes, {rules} rule, on {' or '.join(runs)} seeds"


def regimes_markdown(rows: list[dict], command: str) -> str:
    head = headline(rows)
    cp_text = (f"single-round one-engine regimes also run `cpsat`, time-limited ({cp_note(rows)})"
               if any(r["cpsat_runs"] for r in rows) else "no regime ran `cpsat`")
    intro = (f"Made by `{command}` on {_when()}; the map took {rows[0]['map_wall_s']:.0f} s. Workload lsat-ar "
             "(K = 8, U = 2) on the paper's engine (Qwen3-1.7B on 2x A100, SGLang-style on-demand KV) and trainer. "
             "KV = tokens of the whole deployment (460k: the paper's GPUs; 120k and 60k: pressure); "
             "`2 x DP` splits the same GPUs into two replicas (KV and max_num_seqs halved each) behind a router. "
             "Asynchrony: one round on-policy, or 4 rounds at staleness 0 (round r waits for the weights of round "
             "r - 1) and 1 (one step off-policy). Retract rule: SGLang (retracted requests rejoin the queue's tail) "
             "or vLLM (its head), each engine's default. `fgd-soft+prio`: FGD-soft with the engine's policy "
             "victims and priority preemption. F_w = 2 groups.")
    method = ("Every train end comes from `pipeplan.solve` (simulated and re-checked). Change vs CGP = train end / "
              "CGP's - 1 per seed, then the mean (negative: faster than CGP). Reference: the best schedule found by "
              f"any solver ({cp_text}) and the best valid lower bound any result carries. `why` from the CGP and "
              "FGD-soft schedules (`mechanism`): retractions, how long a retracted request waits to come back, "
              "whether a later round's requests overtake it, the trainer's work left when a round's last group "
              "completes (backlog: one or two updates means the trainer keeps up and only a shorter rollout helps), "
              "the round span, and the share of admissions that passed over a waiting frontier request (bypass).")
    legend = ("Train ends are means over the seeds (s). FGD-soft range: min..max over seeds. best/found, best/bound: "
              "best online policy over the best schedule found and over the best lower bound. Retractions "
              "and retract wait (mean s from retraction to re-admission): CGP / FGD-soft; behind later round: share "
              "of CGP's retracted requests re-admitted after a later round's request; backlog: trainer work left "
              "after each round's last group, CGP / FGD-soft; bypass: share of CGP's admissions that passed over a "
              "waiting frontier request.")
    lines = ["# Where FGD matters: a regime map of FGD vs CGP", "", intro, "", method, "", "## Findings", "",
             *findings(rows), "", f"Headline regime (largest FGD-soft gain on one engine): **{head['regime']}**.", "",
             "## FGD-soft vs CGP by factor (mean over the regimes of each cell)", "",
             "### retract rule x asynchrony", "", *_pivot(rows, "retract_rule", "asynchrony"), "",
             "### KV x tail (SGLang rule)", "",
             *_pivot([r for r in rows if r["retract_rule"] == "sglang"], "kv_tokens", "tail"), "",
             "### deployment x KV (SGLang rule, KV where replicas were run)", "",
             *_pivot([r for r in rows if r["retract_rule"] == "sglang" and r["kv_tokens"] in
                      {x["kv_tokens"] for x in rows if x["replicas"] > 1}], "deployment", "kv_tokens"), "",
             "## Every regime", "", legend, ""]
    table = []
    for r in rows:
        table.append([r["R"], f"{r['kv_tokens'] // 1000}k", r["tail"], r["deployment"], r["asynchrony"],
                      r["retract_rule"], r["seeds"], f"{r['train_end_cgp']:.0f}", _pc(r["fgd_soft_vs_cgp"]),
                      f"{100 * r['fgd_soft_vs_cgp_min']:+.1f}..{100 * r['fgd_soft_vs_cgp_max']:+.1f}",
                      _pc(r["fgd_hard_vs_cgp"]), _pc(r["fgd_prio_vs_cgp"]), _pc(r["fifo_vs_cgp"]), r["best_policy"],
                      cell(r["best_online_vs_best_found"], ".3f"), cell(r["best_online_vs_bound"], ".3f"),
                      f"{r['retractions_cgp']:.0f} / {r['retractions_fgd']:.0f}",
                      f"{r['retract_wait_cgp_s']:.0f} / {r['retract_wait_fgd_s']:.0f}",
                      f"{r['overtaken_later_round_cgp']:.0%}", f"{r['backlog_cgp_s']:.0f} / {r['backlog_fgd_s']:.0f}",
                      f"{r['bypass_cgp']:.0%}", r["why"]])
    lines += markdown_table(("R", "KV", "tail", "deployment", "asynchrony", "rule", "seeds", "CGP (s)", "FGD-soft",
                             "range (%)", "FGD-hard", "FGD+prio", "fifo", "best policy", "best/found", "best/bound",
                             "retractions", "retract wait (s)", "behind later round", "backlog (s)", "bypass", "why"),
                            table)
    return "\n".join(lines) + "\n"


def write_regimes(rows: list[dict], out: str | Path, command: str) -> list[Path]:
    """fgd_regimes.md / .csv and the plots, all moved into ``out`` together (atomically each)."""
    from pipeplan.app.studies.rollout_regime_figures import headline_bars, regime_heatmap

    out = Path(out)
    with staged_folder(out) as stage:
        write_atomic(stage / "fgd_regimes.md", regimes_markdown(rows, command))
        write_atomic(stage / "fgd_regimes.csv", csv_text(rows, COLUMNS))
        regime_heatmap([r for r in rows if r["replicas"] == 1], stage / "fgd_regimes_heatmap.png",
                       "FGD-soft vs CGP train end, one engine (KV x tail per asynchrony)")
        two = [r for r in rows if r["replicas"] > 1]
        if two:
            regime_heatmap(two, stage / "fgd_regimes_replicas.png",
                           "FGD-soft vs CGP train end, 2 data-parallel replicas (KV x tail per asynchrony)")
        head = headline(rows)
        other = twin(rows, head, retract_rule="vllm" if head["retract_rule"] == "sglang" else "sglang")
        headline_bars([head] + ([other] if other else []), stage / "fgd_regimes_headline.png")
    return [out / f for f in FILES if f != "fgd_regimes_replicas.png" or two]

