"""The rollout engine's real-engine features (retract rules, policy victims, swap resume,
priority preemption, replicas and routers, prefix sharing): every feature off is the plain
engine, hand-computed small cases give the exact outcome of each feature, and random rounds
under random feature combinations and every policy keep every invariant.

The hand cases use 1 s decode steps (``c0 = 1``), prompts of 1 token and, for KV pressure, the
``on_demand`` engine with a zero reservation ratio (``ON_DEMAND``): a request is admitted when
its prompt (plus its tokens made) and the next decode step fit, and the engine retracts when
the next step does not fit. After a retraction the ratio is reset to (tokens made + headroom x
running) / (max_new x running) (it never decays back: its initial and minimal values are 0).
"""
import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeplan.core.errors import InputError
from pipeplan.formulations.rollout.checker import check, min_request_time
from pipeplan.formulations.rollout.problem import EngineModel, RolloutProblem
from pipeplan.formulations.rollout.simulator import simulate
from pipeplan.formulations.rollout.workloads import preset_round
from pipeplan.solvers.rollout.online import POLICIES, make_policy
from tests.rollout_helpers import small_round

ON_DEMAND = dict(kv_mode="on_demand", reserve_ratio_init=0.0, reserve_ratio_min=0.0, retract_headroom_steps=1)
FEATURES_OFF = dict(retract_rule="sglang", policy_victims=False, resume="recompute", swap_s_per_token=0.0,
                    priority_preemption=False, replicas=1, router="round_robin", prefix_sharing=False)


def run(problem, policy="cgp", **params):
    s = simulate(problem, make_policy(policy, **params))
    assert check(problem, s) == []
    return s


def stays(s):
    """(request, admit s, end s, tokens made before, finished) of every stay, by admission."""
    return sorted((x.request, x.admit_s, x.end_s, x.generated_before, x.finished) for x in s.segments)


def retracted(s):
    """(time, request) of every retraction, in time order."""
    return sorted((x.end_s, x.request) for x in s.segments if not x.finished)


def with_engine(problem, **changes):
    return dataclasses.replace(problem, engine=dataclasses.replace(problem.engine, **changes))


# -- every feature off --------------------------------------------------------------------------

def _plain(engine: EngineModel) -> EngineModel:
    """The same engine built field by field, without the real-engine features' fields."""
    base = {f.name: getattr(engine, f.name) for f in dataclasses.fields(engine) if f.name not in FEATURES_OFF}
    return EngineModel(**base)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_features_off_is_exactly_the_plain_engine(policy):
    p = preset_round("sci-xw", 16, seed=3)           # on_demand: retractions happen
    plain = dataclasses.replace(p, engine=_plain(p.engine))
    explicit = dataclasses.replace(p, engine=EngineModel(**{**dataclasses.asdict(_plain(p.engine)), **FEATURES_OFF}))
    ref = simulate(plain, make_policy(policy)).to_dict()
    assert simulate(p, make_policy(policy)).to_dict() == ref
    assert simulate(explicit, make_policy(policy)).to_dict() == ref
    # switches that cannot act here change nothing: one replica behind any router; a swap
    # price without swap resume; priority preemption or policy victims where every request
    # is in one class and the policy has no victim order of its own (all but FGD)
    inert = [dict(router="least_load"), dict(router="group_affinity"), dict(swap_s_per_token=1e-3)]
    if not policy.startswith("fgd"):
        inert += [dict(priority_preemption=True), dict(policy_victims=True)]
    for changes in inert:
        assert simulate(with_engine(p, **changes), make_policy(policy)).to_dict() == ref, changes


def test_reserve_engine_never_retracts_whatever_the_retract_rule():
    p = preset_round("lsat-ar", 16, seed=1)
    reserve = with_engine(p, kv_mode="reserve")
    ref = simulate(reserve, make_policy("cgp")).to_dict()
    assert ref["metrics"]["retractions"] == 0
    assert simulate(with_engine(reserve, retract_rule="vllm", resume="swap", swap_s_per_token=1e-4),
                    make_policy("cgp")).to_dict() == ref


# -- retract rules --------------------------------------------------------------------------------

def test_sglang_requeues_at_the_tail_vllm_at_the_head():
    # three requests of 4 tokens, KV for 5 tokens: 0 and 1 start at 0 s (2 prompt tokens +
    # next step 2 = 4 <= 5; request 2 would need 3 + 3 = 6). After step 1 the KV holds 4 and
    # the next step needs 6: request 1 (admitted last, fewest tokens by the tie) is retracted
    # with 1 token, and the ratio reset to (1 + 1) / 4 = 0.5 keeps anything else out while 0
    # runs (2 + 0.5*3 + 1 + 0.5*4 = 6.5 > 5). Request 0 finishes at 4 s.
    def engine(rule):
        return run(small_round([[4], [4], [4]], [1, 1, 1], seqs=4, cap=5, c0=1.0, retract_rule=rule, **ON_DEMAND))

    sglang, vllm = engine("sglang"), engine("vllm")
    assert retracted(sglang) == retracted(vllm) == [(1.0, 1)]
    # SGLang: request 1 rejoins behind request 2, which goes first (4-8 s); 1 makes its last
    # 3 tokens at 8-11 s
    assert sglang.admissions == [(0, 0.0), (1, 0.0), (2, 4.0), (1, 8.0)]
    assert sglang.finish_s == [4.0, 11.0, 8.0]
    # vLLM: request 1 goes back to the head, resumes at 4 s (3 tokens: 7 s), then 2 (7-11 s)
    assert vllm.admissions == [(0, 0.0), (1, 0.0), (1, 4.0), (2, 7.0)]
    assert vllm.finish_s == [4.0, 7.0, 11.0]
    assert [x.generated_before for x in vllm.segments if x.request == 1] == [0, 1]


def test_sglang_retracts_until_its_headroom_fits_vllm_until_one_step_fits():
    # three requests of 6 tokens, KV for 9, headroom 3 steps: after 2 steps the KV holds
    # 3 + 6 = 9. SGLang retracts 2 (KV 6, 6 + 2*3 = 12 > 9) and then 1 (3 + 3 <= 9) at 2 s;
    # vLLM retracts only 2 (6 + 2 = 8 <= 9) and then 1 a step later (8 + 2 > 9) at 3 s.
    def engine(rule):
        return run(small_round([[6], [6], [6]], [1, 1, 1], seqs=4, cap=9, c0=1.0, retract_rule=rule,
                               **{**ON_DEMAND, "retract_headroom_steps": 3}))

    sglang, vllm = engine("sglang"), engine("vllm")
    assert retracted(sglang) == [(2.0, 1), (2.0, 2)]
    assert retracted(vllm) == [(2.0, 2), (3.0, 1)]
    # SGLang requeues 2 then 1 at the tail: 2 resumes first (4 tokens left, 6-10 s), then 1
    assert sglang.admissions[3:] == [(2, 6.0), (1, 10.0)] and sglang.finish_s == [6.0, 14.0, 10.0]
    # vLLM prepends each victim: 1 (retracted last) is at the head and resumes first
    assert vllm.admissions[3:] == [(1, 6.0), (2, 9.0)] and vllm.finish_s == [6.0, 9.0, 13.0]


def test_victim_among_equals_sglang_highest_index_vllm_most_recently_admitted():
    # longest-first admits request 1 (3 tokens) then request 0 (2 tokens) at 0 s; both have
    # made 1 token when the KV (1 + 1 + 2 = 4 = capacity) is full after step 1.
    def engine(rule):
        return run(small_round([[2], [3]], [1, 1], seqs=2, cap=4, c0=1.0, retract_rule=rule, **ON_DEMAND),
                   "longest-first")

    sglang, vllm = engine("sglang"), engine("vllm")
    assert [i for i, _ in sglang.admissions[:2]] == [1, 0]
    assert retracted(sglang) == [(1.0, 1)] and sglang.finish_s == [2.0, 4.0]
    assert retracted(vllm) == [(1.0, 0)] and vllm.finish_s == [4.0, 3.0]


# -- resume: swap vs recompute ----------------------------------------------------------------

def test_swap_moves_kv_out_and_in_recompute_prefills_again():
    # the vLLM case above with prefill 0.5 s per token (a 1-token prompt: 0.5 s) and swap at
    # 0.25 s per token
    def engine(resume):
        return run(small_round([[4], [4], [4]], [1, 1, 1], seqs=4, cap=5, c0=1.0, retract_rule="vllm",
                               prefill_s_per_token=0.5, resume=resume, swap_s_per_token=0.25, **ON_DEMAND))

    rec, swap = engine("recompute"), engine("swap")
    # both: prefills of 0 and 1 (0-1 s), step 1 (1-2 s), request 1 retracted at 2 s with 1 token
    assert retracted(rec) == retracted(swap) == [(2.0, 1)]
    # recompute: 0 runs its last 3 steps (2-5 s); 1 re-prefills prompt + 1 token (1 s: 5-6 s)
    # and makes 3 tokens (6-9 s); 2 prefills at 9 s and finishes at 9.5 + 4 = 13.5 s
    assert stays(rec) == [(0, 0.0, 5.0, 0, True), (1, 0.0, 2.0, 0, False), (1, 5.0, 9.0, 1, True),
                          (2, 9.0, 13.5, 0, True)]
    # swap: swapping 1 out (2 tokens x 0.25 = 0.5 s) stalls the replica (0 finishes at 5.5 s);
    # swapping it in takes 0.5 s instead of a 1 s prefill (5.5-6 s), then 3 tokens (6-9 s)
    assert stays(swap) == [(0, 0.0, 5.5, 0, True), (1, 0.0, 2.0, 0, False), (1, 5.5, 9.0, 1, True),
                           (2, 9.0, 13.5, 0, True)]


# -- prefix sharing ---------------------------------------------------------------------------

def test_prefix_sharing_counts_a_groups_prompt_once():
    # one group of 2 samples (2 tokens each) on a 10-token prompt, KV for 14 tokens (reserve):
    # alone each needs 12, both need 24 without sharing but 10 + 2 + 2 = 14 with it.
    # Prefill: 0.5 s + 0.1 s per token.
    def engine(sharing, cap=14):
        return run(small_round([[2, 2]], [10], seqs=4, cap=cap, c0=1.0, prefill=0.5, prefill_s_per_token=0.1,
                               prefix_sharing=sharing))

    # without: 0 prefills (1.5 s) and runs 2 steps (3.5 s); only then 1 fits: 3.5 + 1.5 + 2 s
    alone = engine(False)
    assert alone.admissions == [(0, 0.0), (1, 3.5)] and alone.finish_s == [3.5, 7.0]
    # with: both at 0 s, the second prefills nothing of the prompt (0.5 s): decode from 2 s
    shared = engine(True)
    assert shared.admissions == [(0, 0.0), (1, 0.0)] and shared.finish_s == [4.0, 4.0]
    # with room for both: sharing saves the second prompt's prefill (1 s) and nothing else
    assert engine(False, cap=24).finish_s == [5.0, 5.0] and engine(True, cap=24).finish_s == [4.0, 4.0]
    # the checker counts the prompt once only with sharing: the shared schedule overflows the
    # KV of an engine without it
    p = small_round([[2, 2]], [10], seqs=4, cap=14, c0=1.0, prefill=0.5, prefill_s_per_token=0.1)
    assert any("reserved KV tokens" in v for v in check(p, shared))


def test_prefix_sharing_fits_k_samples_where_plain_kv_holds_fewer():
    # K = 4 samples of 3 tokens on an 8-token prompt, KV for 8 + 4*3 = 20 tokens: sharing runs
    # all four together (4 s with a 1 s prompt prefill and free sample prefills), without it
    # only one 11-token request fits at a time
    K = 4
    p = small_round([[3] * K], [8], seqs=K, cap=20, c0=1.0, prefill_s_per_token=0.125)
    plain, shared = run(p), run(with_engine(p, prefix_sharing=True))
    assert [t for _, t in shared.admissions] == [0.0] * K and shared.finish_s == [4.0] * K
    assert plain.finish_s == [4.0, 8.0, 12.0, 16.0]
    assert max(plain.finish_s) > max(shared.finish_s)


# -- priority preemption --------------------------------------------------------------------

PRIORITY = dict(responses=[[1, 2], [4, 4], [5, 4]], prompts=[1, 1, 1], seqs=2, c0=1.0, arrival=(0, 1, 4, 5, 2, 3))


def test_frontier_request_preempts_a_running_non_frontier_one():
    # fgd-soft with a frontier of 1 group: 0, 1 (group 0) start at 0 s; 0 finishes at 1 s and
    # the backfill (engine order) takes 4 (group 2). At 2 s group 0 completes, group 1 becomes
    # the frontier: 2 fits, 3 does not (max_num_seqs 2).
    def engine(preempt):
        p = small_round(PRIORITY["responses"], PRIORITY["prompts"], seqs=2, c0=1.0, arrival=PRIORITY["arrival"],
                        priority_preemption=preempt)
        return run(p, "fgd-soft", frontier=1)

    off, on = engine(False), engine(True)
    # without preemption 3 waits until 4 finishes (6 s)
    assert off.retractions == 0 and off.admissions == [(0, 0.0), (1, 0.0), (4, 1.0), (2, 2.0), (3, 6.0), (5, 6.0)]
    # with it, 3 displaces 4 (priority 1) at 2 s; 4 resumes with its 1 token at 6 s
    assert retracted(on) == [(2.0, 4)]
    assert on.admissions == [(0, 0.0), (1, 0.0), (4, 1.0), (2, 2.0), (3, 2.0), (4, 6.0), (5, 6.0)]
    assert on.group_complete_s[1] == 6.0 < off.group_complete_s[1] == 10.0


def test_preemption_counts_a_shared_prompt_as_freed_only_with_its_last_sample():
    # prefix sharing, KV for 19 (reserve), frontier of 1 group: group 0 (2 x 1 token, prompt 1:
    # 3 tokens) and the backfilled group 2 (2 x 3 tokens on a 10-token prompt: 16) fill it at
    # 0 s; group 1 (2 x 6 tokens, prompt 1) waits. At 1 s group 1 is the frontier and needs 7:
    # retracting one sample of group 2 frees only its 3 tokens (the prompt stays for the
    # other), so both go and group 1 runs at once (the engine used to retract one, find that
    # request 2 still did not fit, and leave it waiting with a sample retracted for nothing).
    p = small_round([[1, 1], [6, 6], [3, 3]], [1, 1, 10], seqs=8, cap=19, c0=1.0, arrival=(0, 1, 4, 5, 2, 3),
                    priority_preemption=True, prefix_sharing=True)
    s = run(p, "fgd-soft", frontier=1)
    assert retracted(s) == [(1.0, 4), (1.0, 5)]
    assert s.admissions[4:] == [(2, 1.0), (3, 1.0), (4, 7.0), (5, 7.0)]
    assert s.finish_s == [1.0, 1.0, 7.0, 7.0, 9.0, 9.0]


def test_no_preemption_when_every_priority_is_equal():
    p = small_round(PRIORITY["responses"], PRIORITY["prompts"], seqs=2, c0=1.0, arrival=PRIORITY["arrival"])
    ref = run(p).to_dict()
    on = run(with_engine(p, priority_preemption=True))
    assert on.retractions == 0 and on.to_dict() == ref


# -- policy victims -------------------------------------------------------------------------

def test_fgd_retracts_non_frontier_where_the_engine_would_retract_frontier():
    # frontier of 1 group, K = 1: 0 (frontier) and 2 (backfilled, arrival 0, 2, 1) start at
    # 0 s; 0 finishes at 1 s and 1 (the new frontier) starts with 0 tokens. At 2 s the KV
    # holds 2 prompts + 2 + 1 tokens = 5 of 6 and cannot take a step (2 more): SGLang's rule
    # retracts 1 (fewest tokens: a frontier request), FGD's order retracts 2 (non-frontier).
    def engine(victims, policy="fgd-soft"):
        p = small_round([[1], [5], [5]], [1, 1, 1], seqs=2, cap=6, c0=1.0, arrival=(0, 2, 1),
                        policy_victims=victims, **ON_DEMAND)
        return run(p, policy, **({"frontier": 1} if policy.startswith("fgd") else {}))

    assert retracted(engine(False)) == [(2.0, 1)]
    mine = engine(True)
    assert retracted(mine) == [(2.0, 2)]
    assert mine.finish_s == [1.0, 6.0, 9.0]            # the frontier group completes first
    assert engine(False).finish_s == [1.0, 9.0, 5.0]
    assert engine(True, "cgp").to_dict() == engine(False, "cgp").to_dict()   # no victim order of its own


# -- replicas and routers ------------------------------------------------------------------

def replica_of(s):
    out = {}
    for x in s.segments:
        out.setdefault(x.request, set()).add(x.replica)
    assert all(len(r) == 1 for r in out.values())       # a request never moves
    return {i: r.pop() for i, r in out.items()}


def test_round_robin_alternates_replicas_in_arrival_order():
    arrival = (3, 0, 5, 1, 4, 2)
    p = small_round([[2, 3], [1, 4], [2, 2]], seqs=4, c0=1.0, arrival=arrival, replicas=2, router="round_robin")
    where = replica_of(run(p))
    assert [where[i] for i in arrival] == [0, 1, 0, 1, 0, 1]


def test_group_affinity_keeps_each_group_on_one_replica():
    p = small_round([[2, 3], [1, 4], [2, 2]], seqs=4, c0=1.0, replicas=2, router="group_affinity")
    where = replica_of(run(p))
    # group 0 -> replica 0 (both idle), group 1 -> replica 1 (0 has 2 outstanding), group 2 ->
    # replica 0 (2 outstanding each: the lower index)
    assert [where[i] for i in range(6)] == [0, 0, 1, 1, 0, 0]
    rr = replica_of(run(with_engine(p, router="round_robin")))
    assert [rr[i] for i in range(6)] == [0, 1, 0, 1, 0, 1]  # without affinity groups are split


def test_least_load_sends_new_requests_to_the_replica_with_fewer_outstanding():
    # three rounds of one group (K = 2), staleness 1: rounds 0 and 1 arrive at 0 s, round 2 at
    # the publish of round 0. By then replica 0's requests (0, 2: 1 token) are done while
    # replica 1 still runs request 3 (20 tokens).
    p = dataclasses.replace(small_round([[1, 1], [1, 20], [1, 1]], seqs=4, c0=1.0, replicas=2, router="least_load"),
                            rounds=3)
    least = run(p, staleness=1)
    publish0 = least.publishes[0][1]
    assert least.finish_s[3] > publish0 > max(least.finish_s[i] for i in (0, 1, 2))
    where = replica_of(least)
    assert [where[i] for i in range(4)] == [0, 1, 0, 1]
    assert where[4] == where[5] == 0          # 0 vs 1 outstanding, then 1 vs 1 (the lower index)
    rr = replica_of(run(with_engine(p, router="round_robin"), staleness=1))
    assert [rr[i] for i in range(6)] == [0, 1, 0, 1, 0, 1]


def test_replicas_run_in_parallel():
    p = small_round([[4], [4]], seqs=1, c0=1.0)
    one = run(p)
    two = run(with_engine(p, replicas=2))
    assert one.finish_s == [4.0, 8.0] and two.finish_s == [4.0, 4.0]
    assert two.metrics()["rollout_makespan_s"] == one.metrics()["rollout_makespan_s"] / 2
    assert sorted(x.replica for x in two.segments) == [0, 1]


def test_replicas_see_events_in_clock_order():
    # one group: 0 (1 token) on replica 0, 1 (1 token) on replica 1, both done at 1.5 s
    # (0.5 s prefill); replica 0 then admits 2 (0 tokens: it ends with its prefill at 2 s).
    # The group completes at 2 s, not when replica 1's finish at 1.5 s is handled after it
    # (the simulator used to finish 2 before replica 1's turn at 1.5 s came).
    p = small_round([[1, 1, 0]], [1], seqs=1, c0=1.0, prefill_s_per_token=0.5, replicas=2)
    s = run(p)
    assert s.finish_s == [1.5, 1.5, 2.0] and s.group_complete_s == [2.0]
    assert s.updates[0].start_s == 2.0


def test_many_replicas_cost_a_heap_not_a_scan():
    """2,000 replicas for 2,000 requests: each decision had scanned every replica for the
    earliest, and each group completion had made every idle one decide after such a scan
    (51-57 s; 7-8x per doubling of both). The clock is now a heap and the idle replicas with
    nothing queued decide their empty decisions together: the same figures as the scan gave,
    its 314,981 decisions (empty ones included) among them, in well under a second (a speed
    goal: the suite's --durations shows it; no wall-time assert here)."""
    p = with_engine(preset_round("lsat-ar", 250), replicas=2000)
    s = run(p, "fifo")
    assert check(p, s) == []
    assert s.decisions == 314_981
    assert s.metrics()["train_end_s"] == pytest.approx(1586.757604999, rel=1e-12)


def test_idle_replicas_decide_in_their_turn_among_replicas_deciding_at_the_same_time():
    """Results the scan over replicas gave, pinned: equal lengths on a linear engine make
    replicas decide at the same instants as idle ones woken then (each in its index's turn),
    and a trainer that takes no time publishes a round while woken idle replicas still wait
    for their turn (the round's requests reach them before it comes)."""
    ties = small_round([[4, 4, 2, 4]] * 6 + [[4, 1, 4, 4]] * 6, [2] * 12, seqs=2, c0=1.0, U=2, replicas=40)
    s = run(ties, "fgd-hard")
    assert s.decisions == 422 and s.metrics()["train_end_s"] == pytest.approx(24.642, rel=1e-12)
    assert sorted(set(s.finish_s)) == [2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 13.0, 16.0, 17.0, 20.0, 21.0, 24.0]
    p = small_round([[2, 2]] * 4, [6, 5, 1, 3], seqs=1, c0=1.0, U=2, per_token=0.0, optimizer=0.0, replicas=8)
    p = dataclasses.replace(p, trainer=dataclasses.replace(p.trainer, s_per_microbatch=0.0, publish_s=0.0), rounds=2)
    s = run(p, "fifo")
    assert s.decisions == 38 and s.publishes == [(2.0, 2.0), (4.0, 4.0)]
    assert s.admit_s == [0.0] * 4 + [2.0] * 4 and s.finish_s == [2.0] * 4 + [4.0] * 4
    assert [x.replica for x in s.segments] == list(range(8))


# -- random rounds under random features and every policy ------------------------------------

@st.composite
def featured_rounds(draw):
    rounds = draw(st.sampled_from([1, 1, 2, 3]))
    per, K = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    R = per * rounds
    responses = [[draw(st.integers(0, 12)) for _ in range(K)] for _ in range(R)]
    prompts = [draw(st.integers(1, 6)) for _ in range(R)]
    mode = draw(st.sampled_from(["reserve", "on_demand"]))
    cap = max(prompts) + max(max(r) for r in responses) + draw(st.integers(0, 40))
    engine = dict(retract_rule=draw(st.sampled_from(["sglang", "vllm"])), policy_victims=draw(st.booleans()),
                  resume=draw(st.sampled_from(["recompute", "swap"])),
                  swap_s_per_token=draw(st.sampled_from([0.0, 0.002])),
                  priority_preemption=draw(st.booleans()), replicas=draw(st.integers(1, 3)),
                  router=draw(st.sampled_from(["round_robin", "least_load", "group_affinity"])),
                  prefix_sharing=draw(st.booleans()))
    p = small_round(responses, prompts, seqs=draw(st.integers(1, 5)), cap=cap, c0=draw(st.sampled_from([0.01, 0.02])),
                    c1=draw(st.sampled_from([0.0, 0.001])), c2=draw(st.sampled_from([0.0, 1e-4])),
                    prefill=draw(st.sampled_from([0.0, 0.003])), prefill_s_per_token=draw(st.sampled_from([0.0, 1e-3])),
                    kv_mode=mode, U=draw(st.integers(1, per)), arrival=draw(st.permutations(range(R * K))),
                    reserve_ratio_decay_steps=draw(st.sampled_from([1, 600])),
                    retract_headroom_steps=draw(st.sampled_from([1, 5])), **engine)
    return dataclasses.replace(p, rounds=rounds) if rounds > 1 else p


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(featured_rounds(), st.sampled_from(sorted(POLICIES)), st.integers(0, 2))
def test_every_feature_combination_keeps_every_invariant(problem, policy, staleness):
    s = simulate(problem, make_policy(policy, staleness=staleness))
    assert check(problem, s) == []
    assert all(math.isfinite(f) for f in s.finish_s) and len(s.finish_s) == problem.n_requests
    assert sorted(x.request for x in s.segments if x.finished) == list(range(problem.n_requests))
    end = s.metrics()["train_end_s"]
    assert all(end >= min_request_time(problem, i) - 1e-9 for i in range(problem.n_requests))
    assert {x.replica for x in s.segments} <= set(range(problem.engine.replicas))
    # round r arrives at round r - 1 - staleness's publish; each stay runs on the newest weights
    ends = [e for _, e in s.publishes]
    for x in s.segments:
        r = problem.round_of(x.request // problem.K)
        assert x.admit_s >= (ends[r - 1 - staleness] if r > staleness else 0.0) - 1e-9
        assert x.version == sum(e <= x.admit_s + 1e-9 for e in ends) and max(0, r - staleness) <= x.version <= r


# -- bad input -------------------------------------------------------------------------------

@pytest.mark.parametrize("changes, field", [
    (dict(replicas=0), "engine.replicas"),
    (dict(replicas=1.5), "engine.replicas"),
    (dict(router="random"), "engine.router"),
    (dict(retract_rule="lifo"), "engine.retract_rule"),
    (dict(resume="disk"), "engine.resume"),
    (dict(swap_s_per_token=-1.0), "engine.swap_s_per_token"),
    (dict(prefix_sharing="yes"), "engine.prefix_sharing"),
    (dict(priority_preemption=1), "engine.priority_preemption"),
    (dict(policy_victims=None), "engine.policy_victims"),
])
def test_bad_engine_features_raise_input_error_naming_the_field(changes, field):
    p = small_round([[2, 3], [1, 4]], c0=1.0)
    with pytest.raises(InputError) as err:
        RolloutProblem(p.name, p.prompt_tokens, p.response_tokens, dataclasses.replace(p.engine, **changes), p.trainer)
    assert err.value.field == field and field in str(err.value)
