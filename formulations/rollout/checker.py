"""The feasibility checker of a simulated (or replayed) schedule: lists every violated rule.

Rules: every request finishes exactly once, after stays in the batch that add up to its
response (a retracted request resumes where it stopped) and no sooner than its own work
allows; on every replica, running sequences never exceed ``max_num_seqs`` and the KV tokens in
use after every decode step never exceed the capacity (and, with ``reserve``, neither do the
reserved footprints; with prefix sharing a group's prompt counts once per replica while any of
its samples runs there); a group completes when its last sample finishes; the trainer consumes
every group exactly once, only after it is complete, round by round, with the planned number
of groups per update, one update at a time, each taking the trainer model's time; each round's
weights are published after its last update, for ``publish_s``, the trainer busy meanwhile.

Staleness, recomputed from the publish times (never taken from the schedule's own labels):
every stay of a request of round r runs on the newest weights published when it is admitted,
version v with r - staleness <= v <= r (staleness 0: on-policy, every request of round r on
the weights trained on round r - 1).
"""
from __future__ import annotations

import math

from pipeplan.formulations.rollout.problem import RolloutProblem
from pipeplan.formulations.rollout.schedule import Schedule

# Two times (or a duration and the model's) agree within TOL seconds or REL_TOL of the larger
# magnitude compared, whichever is more. A round's times are float sums, one rounding per event:
# at 5e17 s (1e6-token responses at 1e6 s per token, inside the input limits) one ulp is 64 s,
# and an update's 1.5 s optimizer step vanished from ``end - start`` (reported as a violation,
# exit 1). 1e-12 is about 4,500 ulps: room for the roundings of thousands of events, and below
# TOL for every time under 1e6 s, so the check is unchanged there.
TOL = 1e-6
REL_TOL = 1e-12


def tol(*times: float) -> float:
    """The tolerance for comparing ``times`` (see ``TOL``, ``REL_TOL``)."""
    return max(TOL, REL_TOL * max(abs(t) for t in times))


def min_request_time(problem: RolloutProblem, i: int) -> float:
    """The least time request i can take: one prefill (of its prompt unless prefixes are
    shared) and its decode steps alone in the batch."""
    e, n, p = problem.engine, problem.lengths[i], problem.prompts[i]
    if e.prefix_sharing:
        return e.prefill_time(0) + n * (e.c0_s + e.c1_s) + e.c2_s * n * (n - 1) / 2
    return e.prefill_time(p) + n * (e.c0_s + e.c1_s) + e.c2_s * (n * p + n * (n - 1) / 2)


def _requests(problem: RolloutProblem, s: Schedule) -> list[str]:
    out = []
    stays: dict[int, list] = {}
    for seg in s.segments:
        stays.setdefault(seg.request, []).append(seg)
    if sorted(i for i, _ in s.admissions) != sorted(seg.request for seg in s.segments):
        out.append("the admissions do not match the stays in the batch")
    for i in range(problem.n_requests):
        mine = sorted(stays.get(i, []), key=lambda x: (x.admit_s, x.admit_step))
        if not mine or not mine[-1].finished or sum(x.finished for x in mine) != 1:
            out.append(f"request {i}: does not finish exactly once")
            continue
        made = 0
        for a, b in zip(mine, mine[1:]):
            if b.admit_s < a.end_s - tol(a.end_s):
                out.append(f"request {i}: admitted again at {b.admit_s:.6f}s while still running")
        for x in mine:
            if x.generated_before != made:
                out.append(f"request {i}: resumes at token {x.generated_before}, had made {made}")
            made += x.end_step - x.admit_step
        if made != problem.lengths[i]:
            out.append(f"request {i}: made {made} tokens, its response has {problem.lengths[i]}")
        a, f = s.admit_s[i], s.finish_s[i]
        if not (math.isfinite(a) and math.isfinite(f)) or abs(f - mine[-1].end_s) > tol(f) or abs(a - mine[0].admit_s) > tol(a):
            out.append(f"request {i}: admit/finish times disagree with its stays")
        elif a < -TOL or f < a + min_request_time(problem, i) - tol(f):
            out.append(f"request {i}: admitted {a:.6f}s, finished {f:.6f}s, faster than its own work allows")
    return out


def _capacity(problem: RolloutProblem, s: Schedule) -> list[str]:
    out = []
    by_replica: dict[int, list] = {}
    for x in s.segments:
        by_replica.setdefault(getattr(x, "replica", 0), []).append(x)
    for k, segs in sorted(by_replica.items()):
        where = f"replica {k}, " if problem.engine.replicas > 1 else ""
        if not 0 <= k < problem.engine.replicas:
            out.append(f"{where}no such replica (the engine has {problem.engine.replicas})")
            continue
        out += _replica_capacity(problem, segs, where)
    return out


def _replica_capacity(problem: RolloutProblem, segs: list, where: str) -> list[str]:
    eng, out, K = problem.engine, [], problem.K
    share = eng.prefix_sharing

    def prompt_delta(group_count: dict, g: int, sign: int) -> int:
        """The prompt KV a stay of group g adds (sign 1) or frees (-1)."""
        if not share:
            return problem.prompt_tokens[g]
        before = group_count.get(g, 0)
        group_count[g] = before + sign
        return problem.prompt_tokens[g] if (before == 0 if sign > 0 else before == 1) else 0

    events = sorted([(x.admit_s, 1, x.request) for x in segs] + [(x.end_s, 0, x.request) for x in segs])
    running = reserved = 0
    groups: dict[int, int] = {}
    for t, kind, i in events:            # at equal times a leaving request frees capacity first
        sign = 1 if kind else -1
        running += sign
        reserved += sign * (prompt_delta(groups, i // K, sign) + problem.lengths[i])
        if kind and running > eng.max_num_seqs:
            out.append(f"{where}t={t:.6f}s: {running} running sequences > max_num_seqs {eng.max_num_seqs}")
        if kind and eng.kv_mode == "reserve" and reserved > eng.kv_capacity_tokens:
            out.append(f"{where}t={t:.6f}s: {reserved} reserved KV tokens > capacity {eng.kv_capacity_tokens}")
    # KV in use after decode step k: the prompts (once per group with sharing) plus, over stays
    # with admit_step <= k < end_step, generated_before + (k + 1 - admit_step); it grows while
    # the batch is fixed, so check the last step before each change of the batch.
    changes = []
    for x in segs:
        if x.end_step > x.admit_step:
            changes.append((x.admit_step, 1, x.generated_before + 1 - x.admit_step, x.request // K))
            changes.append((x.end_step, -1, x.generated_before + 1 - x.admit_step, x.request // K))
    changes.sort(key=lambda c: (c[0], c[1]))
    total = count = 0
    groups = {}
    for j, (step, sign, base, g) in enumerate(changes):
        total += sign * (base + prompt_delta(groups, g, sign))
        count += sign
        nxt = changes[j + 1][0] if j + 1 < len(changes) else None
        if count and nxt is not None and nxt > step:
            used = total + count * (nxt - 1)
            if used > eng.kv_capacity_tokens:
                out.append(f"{where}decode step {nxt - 1}: {used} KV tokens in use > capacity {eng.kv_capacity_tokens}")
    return out


def _publishes(s: Schedule) -> list[tuple[float, float]]:
    """One (start, end) per round; the last is the schedule's ``publish_*_s``."""
    pubs = list(s.publishes) or [(s.publish_start_s, s.publish_end_s)]
    pubs[-1] = (s.publish_start_s, s.publish_end_s)
    return pubs


def _trainer(problem: RolloutProblem, s: Schedule, pubs: list) -> list[str]:
    out = []
    consumed = [g for u in s.updates for g in u.groups]
    if sorted(consumed) != list(range(problem.R)):
        out.append("the trainer does not consume every group exactly once")
    if [len(u.groups) for u in s.updates] != problem.update_sizes():
        out.append(f"update sizes {[len(u.groups) for u in s.updates]} differ from {problem.update_sizes()}")
    if len(pubs) != problem.rounds:
        return out + [f"{len(pubs)} weight publishes for {problem.rounds} rounds"]
    free, last_round, last_end = 0.0, 0, {}
    for j, u in enumerate(s.updates):
        rounds = {problem.round_of(g) for g in u.groups if 0 <= g < problem.R}
        if len(rounds) > 1:
            out.append(f"update {j} mixes rounds {sorted(rounds)}")
        r = min(rounds, default=last_round)
        if r < last_round:
            out.append(f"update {j} trains round {r} after round {last_round}")
        if r > last_round:                  # the previous rounds' publishes come first
            free = max(free, pubs[r - 1][1])
        last_round = r
        for g in u.groups:
            if 0 <= g < problem.R and u.start_s < s.group_complete_s[g] - tol(u.start_s):
                out.append(f"update {j} starts at {u.start_s:.6f}s before group {g} completes "
                           f"({s.group_complete_s[g]:.6f}s)")
        if u.start_s < free - tol(free):
            out.append(f"update {j} starts at {u.start_s:.6f}s while the trainer is busy until {free:.6f}s")
        tokens = sum(problem.group_tokens[g] for g in u.groups if 0 <= g < problem.R)
        if u.tokens != tokens or abs((u.end_s - u.start_s) - problem.trainer.update_time(tokens)) > tol(u.end_s):
            out.append(f"update {j}: {u.end_s - u.start_s:.6f}s for {u.tokens} tokens, the trainer model says "
                       f"{problem.trainer.update_time(tokens):.6f}s for {tokens}")
        free = u.end_s
        last_end[r] = u.end_s
    for r, (start, end) in enumerate(pubs):
        if start < last_end.get(r, 0.0) - tol(start):
            out.append(f"off-policy: round {r}'s weights published at {start:.6f}s before its last update ends "
                       f"({last_end.get(r, 0.0):.6f}s)")
        if abs(end - start - problem.trainer.publish_s) > tol(end):
            out.append(f"round {r}'s publish takes {end - start:.6f}s, the trainer model says {problem.trainer.publish_s}s")
    return out


def _versions(problem: RolloutProblem, s: Schedule, pubs: list, staleness: int) -> list[str]:
    out, ends = [], sorted(end for _, end in pubs)
    first: dict[int, tuple] = {}
    for x in s.segments:
        lo = sum(e <= x.admit_s - tol(x.admit_s) for e in ends)
        hi = sum(e <= x.admit_s + tol(x.admit_s) for e in ends)
        r = problem.round_of(x.request // problem.K)
        v = getattr(x, "version", 0)
        if not lo <= v <= hi:
            out.append(f"request {x.request}: admitted at {x.admit_s:.6f}s on weights version {v}, "
                       f"the newest published then is {hi}")
        if not r - staleness <= v <= r:
            kind = "off-policy" if staleness == 0 else f"staleness > {staleness}"
            out.append(f"{kind}: request {x.request} of round {r} admitted at {x.admit_s:.6f}s on weights version {v}")
        if x.request not in first or x.admit_s < first[x.request][0]:
            first[x.request] = (x.admit_s, v)
    for i, v in enumerate(s.weight_version):
        if i in first and v != first[i][1]:
            out.append(f"off-policy: request {i} is labelled weights version {v}, its first stay ran on {first[i][1]}")
    return out


def check(problem: RolloutProblem, s: Schedule, staleness: int | None = None) -> list[str]:
    """Every violated rule. ``staleness``: the bound to hold the schedule to (default the one
    the schedule declares)."""
    out = _requests(problem, s)
    if out:
        return out
    out += _capacity(problem, s)
    for g in range(problem.R):
        last = max(s.finish_s[i] for i in problem.group_requests(g))
        if abs(s.group_complete_s[g] - last) > tol(last):
            out.append(f"group {g}: completion {s.group_complete_s[g]:.6f}s is not its last finish {last:.6f}s")
    pubs = _publishes(s)
    out += _trainer(problem, s, pubs)
    out += _versions(problem, s, pubs, s.staleness if staleness is None else staleness)
    return out
