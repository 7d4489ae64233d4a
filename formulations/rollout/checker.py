"""The feasibility checker of a simulated (or replayed) round: lists every violated rule.

Rules: every request finishes exactly once, after stays in the batch that add up to its
response (a retracted request resumes where it stopped) and no sooner than its own work
allows; running sequences never exceed ``max_num_seqs``; the KV tokens in use after every
decode step never exceed the capacity (and, with ``reserve``, neither do the reserved
footprints); a group completes when its last sample finishes; the trainer consumes every group
exactly once, only after it is complete, with the planned number of groups per update, one
update at a time, each taking the trainer model's time; and the round is on-policy: every
request is generated with the round's weights (version 0), and new weights are published only
after the last update.
"""
from __future__ import annotations

import math

from pipeplan.formulations.rollout.problem import RolloutProblem
from pipeplan.formulations.rollout.schedule import Schedule

TOL = 1e-6


def min_request_time(problem: RolloutProblem, i: int) -> float:
    """The least time request i can take: one prefill and its decode steps alone in the batch."""
    e, n, p = problem.engine, problem.lengths[i], problem.prompts[i]
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
            if b.admit_s < a.end_s - TOL:
                out.append(f"request {i}: admitted again at {b.admit_s:.6f}s while still running")
        for x in mine:
            if x.generated_before != made:
                out.append(f"request {i}: resumes at token {x.generated_before}, had made {made}")
            made += x.end_step - x.admit_step
        if made != problem.lengths[i]:
            out.append(f"request {i}: made {made} tokens, its response has {problem.lengths[i]}")
        a, f = s.admit_s[i], s.finish_s[i]
        if not (math.isfinite(a) and math.isfinite(f)) or abs(f - mine[-1].end_s) > TOL or abs(a - mine[0].admit_s) > TOL:
            out.append(f"request {i}: admit/finish times disagree with its stays")
        elif a < -TOL or f < a + min_request_time(problem, i) - TOL:
            out.append(f"request {i}: admitted {a:.6f}s, finished {f:.6f}s, faster than its own work allows")
    return out


def _capacity(problem: RolloutProblem, s: Schedule) -> list[str]:
    eng, out = problem.engine, []
    events = sorted([(x.admit_s, 1, x.request) for x in s.segments] + [(x.end_s, 0, x.request) for x in s.segments])
    running = reserved = 0
    for t, kind, i in events:            # at equal times a leaving request frees capacity first
        sign = 1 if kind else -1
        running += sign
        reserved += sign * problem.footprint(i)
        if kind and running > eng.max_num_seqs:
            out.append(f"t={t:.6f}s: {running} running sequences > max_num_seqs {eng.max_num_seqs}")
        if kind and eng.kv_mode == "reserve" and reserved > eng.kv_capacity_tokens:
            out.append(f"t={t:.6f}s: {reserved} reserved KV tokens > capacity {eng.kv_capacity_tokens}")
    # KV in use after decode step k: sum over stays with admit_step <= k < end_step of
    # prompt + generated_before + (k + 1 - admit_step); it grows while the batch is fixed, so
    # check the last step before each change of the batch.
    changes = []
    for x in s.segments:
        if x.end_step > x.admit_step:
            base = problem.prompts[x.request] + x.generated_before + 1 - x.admit_step
            changes.append((x.admit_step, 1, base))
            changes.append((x.end_step, -1, base))
    changes.sort()
    total = count = 0
    for j, (step, sign, base) in enumerate(changes):
        total += sign * base
        count += sign
        nxt = changes[j + 1][0] if j + 1 < len(changes) else None
        if count and nxt is not None and nxt > step:
            used = total + count * (nxt - 1)
            if used > eng.kv_capacity_tokens:
                out.append(f"decode step {nxt - 1}: {used} KV tokens in use > capacity {eng.kv_capacity_tokens}")
    return out


def check(problem: RolloutProblem, s: Schedule) -> list[str]:
    out = _requests(problem, s)
    if out:
        return out
    out += _capacity(problem, s)
    for g in range(problem.R):
        last = max(s.finish_s[i] for i in problem.group_requests(g))
        if abs(s.group_complete_s[g] - last) > TOL:
            out.append(f"group {g}: completion {s.group_complete_s[g]:.6f}s is not its last finish {last:.6f}s")
    consumed = [g for u in s.updates for g in u.groups]
    if sorted(consumed) != list(range(problem.R)):
        out.append("the trainer does not consume every group exactly once")
    if [len(u.groups) for u in s.updates] != problem.update_sizes():
        out.append(f"update sizes {[len(u.groups) for u in s.updates]} differ from {problem.update_sizes()}")
    free = 0.0
    for j, u in enumerate(s.updates):
        for g in u.groups:
            if 0 <= g < problem.R and u.start_s < s.group_complete_s[g] - TOL:
                out.append(f"update {j} starts at {u.start_s:.6f}s before group {g} completes "
                           f"({s.group_complete_s[g]:.6f}s)")
        if u.start_s < free - TOL:
            out.append(f"update {j} starts at {u.start_s:.6f}s while the trainer is busy until {free:.6f}s")
        tokens = sum(problem.group_tokens[g] for g in u.groups if 0 <= g < problem.R)
        if u.tokens != tokens or abs((u.end_s - u.start_s) - problem.trainer.update_time(tokens)) > TOL:
            out.append(f"update {j}: {u.end_s - u.start_s:.6f}s for {u.tokens} tokens, the trainer model says "
                       f"{problem.trainer.update_time(tokens):.6f}s for {tokens}")
        free = u.end_s
    if any(v != 0 for v in s.weight_version):
        out.append("off-policy: some requests were generated with weights other than the round's (version 0)")
    if s.publish_start_s < free - TOL:
        out.append(f"off-policy: weights published at {s.publish_start_s:.6f}s before the last update ends ({free:.6f}s)")
    if max(t for _, t in s.admissions) > s.publish_start_s + TOL:
        out.append("off-policy: a request was admitted after the new weights were published")
    return out
