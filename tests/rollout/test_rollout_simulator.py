"""The rollout simulator and its checker: invariants on random rounds under every policy,
hand-checked timings, replay of plans, and the checker catching broken schedules."""
import copy
import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pipeplan
from pipeplan.core.registry import solvers
from pipeplan.formulations.rollout.bounds import earliest_completions, train_end_lower_bound
from pipeplan.formulations.rollout.checker import check
from pipeplan.formulations.rollout.replay import replay
from pipeplan.formulations.rollout.schedule import Update
from pipeplan.formulations.rollout.simulator import decode_time, simulate, steps_until
from pipeplan.formulations.rollout.workloads import preset_round
from pipeplan.solvers.rollout import OFFLINE
from pipeplan.solvers.rollout.online import POLICIES, make_policy
from pipeplan.solvers.rollout.policies import DeferPolicy
from tests.rollout_helpers import small_round

ONLINE = [s.name for s in solvers("rollout") if s.name not in OFFLINE]


def test_registry_has_every_policy_and_the_offline_solvers():
    assert set(POLICIES) == set(ONLINE)
    assert {"step-plan", "cpsat-lns"} <= {s.name for s in solvers("rollout")}
    assert {"sync", "cgp", "fgd-hard", "fgd-soft", "fifo", "longest-first", "shortest-first", "deadline"} <= set(ONLINE)
    assert [s.name for s in solvers("rollout") if s.exact] == ["cpsat"]


def test_closed_form_decode_time_is_the_sum_of_its_steps():
    eng = small_round([[3]], c0=0.01, c1=0.002, c2=1e-4).engine
    b, kv0 = 5, 123
    by_step = sum(eng.step_time(b, kv0 + b * j) for j in range(17))
    assert decode_time(eng, b, kv0, 17) == pytest.approx(by_step, rel=1e-12)
    for dt in (0.001, 0.05, 0.3, 1.7):
        g = steps_until(eng, b, kv0, dt)
        assert decode_time(eng, b, kv0, g) >= dt - 1e-9 and (g == 1 or decode_time(eng, b, kv0, g - 1) < dt)


def test_two_requests_by_hand():
    # one slot: request 0 (4 tokens) then request 1 (2 tokens); 1 s per step, prefill 0.5 s
    p = small_round([[4], [2]], seqs=1, c0=1.0, prefill=0.5, per_token=0.25, optimizer=1.0, U=1)
    s = simulate(p, make_policy("cgp"))
    assert s.admit_s == [0.0, 4.5] and s.finish_s == [4.5, 7.0]
    # update of group 0: 6 tokens x 0.25 + 1 micro-batch x 0.1 + 1.0 = 2.6 s
    assert [(u.groups, u.start_s, u.end_s) for u in s.updates] == [((0,), 4.5, pytest.approx(7.1)),
                                                                   ((1,), pytest.approx(7.1), pytest.approx(7.1 + 2.1))]
    m = s.metrics()
    assert m["first_dispatch_s"] == 4.5 and m["train_end_s"] == pytest.approx(9.2)
    assert m["waiting_ratio"] == pytest.approx((9.2 - 4.7) / 9.2)
    sync = simulate(p, make_policy("sync")).metrics()
    assert sync["first_dispatch_s"] == sync["rollout_makespan_s"] == 7.0


@st.composite
def rounds(draw):
    R, K = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    responses = [[draw(st.integers(0, 30)) for _ in range(K)] for _ in range(R)]
    prompts = [draw(st.integers(1, 10)) for _ in range(R)]
    mode = draw(st.sampled_from(["reserve", "on_demand"]))
    need = max(prompts) + max(max(r) for r in responses)
    cap = need + draw(st.integers(0, 60))
    arrival = draw(st.permutations(range(R * K)))
    return small_round(responses, prompts, seqs=draw(st.integers(1, 6)), cap=cap,
                       c0=draw(st.sampled_from([0.01, 0.02])), c1=draw(st.sampled_from([0.0, 0.001])),
                       c2=draw(st.sampled_from([0.0, 1e-4])), prefill=draw(st.sampled_from([0.0, 0.003])),
                       kv_mode=mode, U=draw(st.integers(1, R)), arrival=arrival,
                       reserve_ratio_decay_steps=draw(st.sampled_from([1, 600])),
                       retract_headroom_steps=draw(st.sampled_from([1, 20])))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rounds(), st.sampled_from(sorted(POLICIES)))
def test_every_policy_keeps_every_invariant_and_replays_exactly(problem, policy):
    s = simulate(problem, make_policy(policy))
    assert check(problem, s) == []        # capacity, once-only finishes, complete groups, on-policy
    again = replay(problem, s.plan())
    assert again.metrics() == pytest.approx(s.metrics(), rel=1e-9, abs=1e-9)
    assert s.metrics()["train_end_s"] >= train_end_lower_bound(problem) - 1e-9
    # the c-th group to complete does so no sooner than any c groups can
    for done, bound in zip(sorted(s.group_complete_s), earliest_completions(problem)):
        assert done >= bound - 1e-9


def test_on_demand_engine_retracts_and_stays_within_capacity():
    p = preset_round("sci-xw", 64, seed=0)
    s = simulate(p, make_policy("cgp"))
    assert s.retractions > 0
    assert check(p, s) == []
    resumed = [x for x in s.segments if x.generated_before > 0]
    assert resumed and all(not x.finished or x.end_step - x.admit_step == p.lengths[x.request] - x.generated_before
                           for x in resumed)


def test_simulator_is_deterministic_by_seed():
    a = simulate(preset_round("sci-xw", 32, seed=4), make_policy("fgd-soft"))
    b = simulate(preset_round("sci-xw", 32, seed=4), make_policy("fgd-soft"))
    assert a.to_dict() == b.to_dict()
    c = preset_round("sci-xw", 32, seed=5)
    assert c.lengths != preset_round("sci-xw", 32, seed=4).lengths


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_solvers_results_are_rescored_by_the_simulator(policy):
    p = preset_round("lsat-ar", 32, seed=2)
    r = pipeplan.solve(p, policy)
    assert r.termination.value == "completed" and r.quality.value == "feasible", r.message
    s = replay(p, r.plan)
    assert check(p, s) == []
    assert s.metrics() == pytest.approx(r.objectives, rel=1e-9)
    assert r.bound["train_end_s"] <= r.objectives["train_end_s"]


def test_hard_gate_admits_only_frontier_groups():
    p = preset_round("sci-jl", 32, seed=0)
    F = 3
    s = simulate(p, make_policy("fgd-hard", frontier=F))
    assert check(p, s) == []
    for i, t in s.admissions:
        unfinished = sorted(g for g in range(p.R) if s.group_complete_s[g] > t + 1e-12)
        assert i // p.K in unfinished[:F]


def test_oracle_orders_are_the_admission_orders():
    p = small_round([[5, 1, 3], [2, 8, 4]], seqs=2, c0=0.01)
    for policy, key in (("longest-first", lambda i: -p.lengths[i]), ("shortest-first", lambda i: p.lengths[i])):
        s = simulate(p, make_policy(policy))
        assert [i for i, _ in s.admissions] == sorted(range(p.n_requests), key=key)


def test_slack_orders_by_group_longest_minus_alpha_times_own_length():
    p = small_round([[5, 1, 3], [2, 8, 4]], seqs=1, c0=0.01)
    for alpha in (0.0, 0.5, 1.0):
        s = simulate(p, make_policy("slack", alpha=alpha))
        key = {i: max(p.lengths[j] for j in p.group_requests(i // p.K)) - alpha * p.lengths[i]
               for i in range(p.n_requests)}
        assert [i for i, _ in s.admissions] == sorted(range(p.n_requests), key=lambda i: (key[i], i))
    # alpha 0: the easier group (longest 5) entirely before the harder one (longest 8)
    assert [i for i, _ in simulate(p, make_policy("slack", alpha=0.0)).admissions][:3] == [0, 1, 2]


def _first_admissions(schedule) -> dict[int, float]:
    first = {}
    for i, t in schedule.admissions:
        first.setdefault(i, t)
    return first


@pytest.mark.parametrize("rounds", [1, 2])
def test_defer_admits_the_cheapest_groups_of_each_round_last(rounds):
    p = dataclasses.replace(preset_round("lsat-ar", 32, seed=0), rounds=rounds)
    n, held = p.groups_per_round, 5
    s = simulate(p, make_policy("defer", held=held))
    assert check(p, s) == []
    first = _first_admissions(s)
    for r in range(rounds):
        groups = range(r * n, (r + 1) * n)
        cheapest = set(sorted(groups, key=lambda g: (p.group_tokens[g], g))[:held])
        late = [first[i] for g in cheapest for i in p.group_requests(g)]
        early = [first[i] for g in set(groups) - cheapest for i in p.group_requests(g)]
        # the engine admits in the policy's order and never overtakes: a held request waits for
        # every other request of its round (on demand: retractions re-admit later, first admissions do not)
        assert min(late) >= max(early) - 1e-9


def test_defer_holding_none_is_slack():
    p = preset_round("olyphys", 32, seed=1)
    assert simulate(p, make_policy("defer", held=0)).admissions == simulate(p, make_policy("slack")).admissions


def test_defer_chooses_the_count_whose_round_ends_first():
    from pipeplan.app.studies.rollout import linearized

    p = linearized(preset_round("lsat-ar", 32, seed=0))
    r = pipeplan.solve(p, "defer")
    counts = DeferPolicy().candidates(p)
    assert counts == list(range(32))          # every count up to 33 of them
    ends = {held: simulate(p, make_policy("defer", held=held)).metrics()["train_end_s"] for held in counts}
    assert r.params["chosen"] in counts
    assert r.objectives["train_end_s"] == pytest.approx(min(ends.values()), rel=1e-12)
    assert r.objectives["train_end_s"] == pytest.approx(ends[r.params["chosen"]], rel=1e-12)
    # here holding some groups back beats slack's order (held = 0) by more than 2%
    assert r.params["chosen"] > 0 and r.objectives["train_end_s"] < 0.98 * ends[0]
    # without time to choose, it is slack
    assert (r.params["counts_tried"], r.params["counts"], r.termination.value) == (32, 32, "completed")
    quick = pipeplan.solve(p, "defer", time_limit=1e-9)
    assert quick.params["chosen"] == 0 and quick.objectives["train_end_s"] == pytest.approx(ends[0], rel=1e-12)
    assert quick.params["counts_tried"] == 1 and quick.termination.value == "time_limit"
    assert "after 1 of 32 counts" in quick.message and quick.stopped_by == "time"


def test_defer_counts_beyond_33_are_spread_evenly():
    counts = DeferPolicy().candidates(preset_round("lsat-ar", 96, seed=0))
    assert len(counts) == 33 and counts[0] == 0 and counts[-1] == 95 and counts == sorted(set(counts))
    assert DeferPolicy().candidates(small_round([[1], [2], [3]])) == [0, 1, 2]


@pytest.mark.parametrize("held", ["many", -1, True, 2.5])
def test_defer_rejects_a_count_that_is_not_one(held):
    with pytest.raises(ValueError, match="held"):
        make_policy("defer", held=held)


def test_sync_trains_after_the_whole_round_in_prompt_order():
    p = preset_round("lsat-ar", 32, seed=0)
    s = simulate(p, make_policy("sync"))
    assert [u.groups for u in s.updates] == [(2 * j, 2 * j + 1) for j in range(16)]
    assert s.updates[0].start_s == max(s.finish_s)


def _broken(problem, schedule, what):
    s = copy.deepcopy(schedule)
    if what == "capacity":      # request 4 admitted at once, beside the two running ones (at most 2)
        seg = s.segments[-1]
        s.segments[-1] = dataclasses.replace(seg, admit_s=0.0)
        s.admit_s[seg.request] = 0.0
    elif what == "early update":
        u = s.updates[0]
        s.updates[0] = Update(u.groups, u.tokens, 0.0, u.end_s - u.start_s)
    elif what == "publish":
        s.publish_start_s = s.updates[-1].start_s
    elif what == "off-policy":
        s.weight_version[3] = 1
    elif what == "twice":
        s.segments.append(dataclasses.replace(s.segments[0]))
        s.admissions.append(s.admissions[0])
    elif what == "group eaten twice":
        u = s.updates[1]
        s.updates[1] = Update((s.updates[0].groups[0],) + u.groups[1:], u.tokens, u.start_s, u.end_s)
    return s


@pytest.mark.parametrize("what, says", [("capacity", "running sequences > max_num_seqs"),
                                        ("early update", "before group 0 completes"),
                                        ("publish", "published at"), ("off-policy", "labelled weights version 1"),
                                        ("twice", "does not finish exactly once"),
                                        ("group eaten twice", "every group exactly once")])
def test_checker_catches_broken_schedules(what, says):
    """Each break is caught by its own rule (the capacity case had been caught only because its
    admit times disagreed with its stays: a test audit)."""
    p = small_round([[6, 2], [3, 3], [4, 1]], seqs=2, c0=0.5, U=1)
    s = simulate(p, make_policy("cgp"))
    assert check(p, s) == []
    faults = check(p, _broken(p, s, what))
    assert any(says in f for f in faults), faults


def test_lower_bound_holds_for_every_policy_on_presets():
    for name in ("lsat-ar", "olyphys"):
        p = preset_round(name, 64)
        lb = train_end_lower_bound(p)
        assert all(simulate(p, make_policy(q)).metrics()["train_end_s"] >= lb for q in POLICIES)
        assert lb > 0 and not math.isnan(lb)


def _huge_round():
    """1e6-token responses at 1e6 s per token (inside the input limits): times near 5e17 s,
    where one ulp is 64 s (audit: an update's 1.5 s optimizer step vanished from end - start,
    and the checker reported that rounding as a violation, exit 1)."""
    return small_round([[1_000_000, 4], [3, 1]], [2, 1_000_000], seqs=2, cap=3_000_000, c0=1e6, c1=1e6, c2=1e6,
                       prefill_s_per_token=1e6, per_token=1e6, optimizer=1.5, budget=4_000_000, U=1)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_checker_tolerance_scales_with_the_times(policy):
    p = _huge_round()
    s = simulate(p, make_policy(policy))
    assert s.metrics()["train_end_s"] > 1e17
    assert check(p, s) == []


@pytest.mark.parametrize("what", ["early update", "publish", "off-policy", "twice", "group eaten twice"])
def test_checker_catches_broken_schedules_at_huge_times(what):      # capacity: whole counts, no tolerance
    p = _huge_round()
    s = simulate(p, make_policy("cgp"))
    assert check(p, _broken(p, s, what)) != []


def test_checker_catches_a_wrong_update_time_at_huge_times():
    p = _huge_round()
    s = simulate(p, make_policy("cgp"))
    u = s.updates[-1]
    s.updates[-1] = Update(u.groups, u.tokens, u.start_s, u.end_s + 1e-9 * u.end_s)
    assert any("the trainer model says" in v for v in check(p, s))
