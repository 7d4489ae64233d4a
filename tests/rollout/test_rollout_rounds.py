"""Several RL rounds with staleness-bounded policies: when each round's requests arrive, which
weights each stay runs on, the trainer round by round, the throughput gained by staleness, and
the checker catching schedules that break the rounds' rules."""
import copy
import dataclasses

import pytest

import pipeplan
from pipeplan.core.errors import InputError
from pipeplan.formulations.rollout.checker import check
from pipeplan.formulations.rollout.schedule import Update
from pipeplan.formulations.rollout.simulator import simulate
from pipeplan.formulations.rollout.workloads import preset_round
from pipeplan.solvers.rollout.online import POLICIES, make_policy
from tests.rollout_helpers import small_round


def rounds_of(problem, rounds):
    return dataclasses.replace(problem, rounds=rounds)


def round_of_request(problem, i):
    return problem.round_of(i // problem.K)


@pytest.fixture(scope="module")
def three_rounds():
    return preset_round("lsat-ar", 8, rounds=3)


def test_two_rounds_by_hand():
    # one request per round (2 and 3 tokens), 1 s steps; an update of t tokens takes
    # 0.001 t + 0.1 (one micro-batch) + 0.5 s, a publish 1 s
    p = rounds_of(small_round([[2], [3]], seqs=4, c0=1.0, U=1), 2)
    on = simulate(p, make_policy("cgp"))
    assert check(p, on) == []
    # staleness 0: round 1 arrives at round 0's publish (2 + 0.604 + 1 = 3.604 s)
    assert on.admit_s == [0.0, pytest.approx(3.604)] and on.finish_s == [2.0, pytest.approx(6.604)]
    assert [(u.groups, u.start_s, u.end_s) for u in on.updates] == [
        ((0,), 2.0, pytest.approx(2.604)), ((1,), pytest.approx(6.604), pytest.approx(7.209))]
    assert on.publishes == [(pytest.approx(2.604), pytest.approx(3.604)), (pytest.approx(7.209), pytest.approx(8.209))]
    assert on.weight_version == [0, 1] and [x.version for x in on.segments] == [0, 1]
    # staleness 1: both rounds at 0 s on version 0; round 1 trains after round 0's publish
    off = simulate(p, make_policy("cgp", staleness=1))
    assert check(p, off) == [] and off.staleness == 1
    assert off.admit_s == [0.0, 0.0] and off.finish_s == [2.0, 3.0]
    assert [(u.start_s, u.end_s) for u in off.updates] == [(2.0, pytest.approx(2.604)),
                                                          (pytest.approx(3.604), pytest.approx(4.209))]
    assert off.publish_end_s == pytest.approx(5.209) and off.weight_version == [0, 0]
    m = off.metrics()
    assert m["samples_per_s"] == pytest.approx(2 / 5.209) and m["max_staleness"] == 1 and m["mean_staleness"] == 0.5
    assert on.metrics()["samples_per_s"] == pytest.approx(2 / 8.209) and on.metrics()["max_staleness"] == 0


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_on_policy_rounds_wait_for_the_previous_publish(three_rounds, policy):
    p = three_rounds
    s = simulate(p, make_policy(policy))
    assert check(p, s) == []
    ends = [end for _, end in s.publishes]
    assert len(ends) == p.rounds and ends == sorted(ends)
    for x in s.segments:
        r = round_of_request(p, x.request)
        assert x.version == r
        if r:
            assert x.admit_s >= ends[r - 1] - 1e-9
    assert s.weight_version == [round_of_request(p, i) for i in range(p.n_requests)]
    # the trainer takes each round's groups only, after the previous round's publish
    per = len(s.updates) // p.rounds
    for j, u in enumerate(s.updates):
        r = j // per
        assert {p.round_of(g) for g in u.groups} == {r}
        if r:
            assert u.start_s >= ends[r - 1] - 1e-9
        assert ends[r] - p.trainer.publish_s >= u.end_s - 1e-9
    assert s.metrics()["max_staleness"] == 0


@pytest.mark.parametrize("policy", ["cgp", "sync", "fgd-soft", "deadline"])
def test_staleness_one_is_no_slower_and_lags_at_most_one_version(three_rounds, policy):
    p = three_rounds
    on = simulate(p, make_policy(policy)).metrics()
    s = simulate(p, make_policy(policy, staleness=1))
    assert check(p, s) == []
    off = s.metrics()
    assert off["samples_per_s"] >= on["samples_per_s"]
    assert off["max_staleness"] <= 1 and off["mean_staleness"] > 0
    # round r arrives at round r - 2's publish: rounds 0 and 1 at 0 s, round 2 after the first
    ends = [end for _, end in s.publishes]
    for x in s.segments:
        r = round_of_request(p, x.request)
        assert r - 1 <= x.version <= r
        assert x.admit_s >= (ends[r - 2] if r >= 2 else 0.0) - 1e-9
        assert x.version == sum(e <= x.admit_s + 1e-9 for e in ends)   # the newest weights then


@pytest.mark.parametrize("staleness", [1, 2])
def test_checker_holds_a_schedule_to_a_smaller_staleness(three_rounds, staleness):
    p = three_rounds
    s = simulate(p, make_policy("cgp", staleness=staleness))
    assert check(p, s) == [] and check(p, s, staleness=staleness) == []
    tighter = check(p, s, staleness=staleness - 1)
    assert tighter and all("off-policy" in v or "staleness >" in v for v in tighter)
    assert any(v.startswith("off-policy" if staleness == 1 else "staleness > 1") for v in tighter)
    lagging = [x for x in s.segments if x.version < round_of_request(p, x.request) - (staleness - 1)]
    assert len(tighter) == len(lagging) > 0


def _broken(problem, schedule, what):
    s = copy.deepcopy(schedule)
    if what == "segment version":             # a stay of round 1 labelled with weights not yet out
        j = next(j for j, x in enumerate(s.segments) if round_of_request(problem, x.request) == 1)
        s.segments[j] = dataclasses.replace(s.segments[j], version=2)
    elif what == "request version":
        i = next(i for i in range(problem.n_requests) if round_of_request(problem, i) == 2)
        s.weight_version[i] = 1
    elif what == "update mixes rounds":       # swap a group of round 0's last update with round 1's first
        per = len(s.updates) // problem.rounds
        a, b = s.updates[per - 1], s.updates[per]
        s.updates[per - 1] = Update((b.groups[0],) + a.groups[1:], a.tokens, a.start_s, a.end_s)
        s.updates[per] = Update((a.groups[0],) + b.groups[1:], b.tokens, b.start_s, b.end_s)
    elif what == "publish before the last update":
        start, end = s.publishes[0]
        shift = problem.trainer.publish_s + 1.0
        s.publishes[0] = (start - shift, end - shift)
    elif what == "last publish early":
        s.publish_start_s -= 1.0
        s.publish_end_s -= 1.0
    elif what == "round trained before the publish":
        per = len(s.updates) // problem.rounds
        u = s.updates[per]
        d = s.publishes[0][1] - u.start_s + 0.5
        s.updates[per] = Update(u.groups, u.tokens, u.start_s - d, u.end_s - d)
    elif what == "missing publish":
        s.publishes = s.publishes[:-2] + s.publishes[-1:]
    return s


@pytest.mark.parametrize("what, message", [
    ("segment version", "newest published then is"),
    ("request version", "is labelled weights version"),
    ("update mixes rounds", "mixes rounds"),
    ("publish before the last update", "before its last update ends"),
    ("last publish early", "before its last update ends"),
    ("round trained before the publish", "while the trainer is busy"),
    ("missing publish", "weight publishes for 3 rounds"),
])
def test_checker_catches_broken_rounds(three_rounds, what, message):
    p = three_rounds
    s = simulate(p, make_policy("cgp"))
    assert check(p, s) == []
    found = check(p, _broken(p, s, what))
    assert any(message in v for v in found), found


def test_rounds_and_staleness_bad_input():
    p = small_round([[2, 3], [1, 4], [5, 6], [1, 1]], c0=1.0)
    for bad in (0, -1, True, 1.5):
        with pytest.raises(InputError) as err:
            rounds_of(p, bad)
        assert err.value.field == "rounds"
    with pytest.raises(InputError, match="4 groups do not split into 3 equal rounds") as err:
        rounds_of(p, 3)
    assert err.value.field == "rounds"
    with pytest.raises(InputError, match="fewer than U = 2") as err:
        rounds_of(small_round([[2, 3], [1, 4], [5, 6], [1, 1]], c0=1.0, U=2), 4)
    assert rounds_of(p, 4).groups_per_round == 1 and rounds_of(p, 2).update_sizes() == [1, 1, 1, 1]
    for bad in (-1, True, 1.5, "1"):
        with pytest.raises(InputError) as err:
            make_policy("cgp", staleness=bad)
        assert err.value.field == "staleness"
    with pytest.raises(InputError, match="rounds"):
        preset_round("lsat-ar", 8, rounds=0)


@pytest.mark.parametrize("policy", ["cgp", "sync", "fgd-soft"])
@pytest.mark.parametrize("staleness", [0, 1])
def test_a_plan_of_several_rounds_replays_to_its_own_schedule(policy, staleness):
    from pipeplan.formulations.rollout.replay import replay
    p = preset_round("lsat-ar", 8, rounds=3)
    r = pipeplan.solve(p, policy, **({"staleness": staleness} if staleness else {}))
    s = replay(p, r.plan)
    assert s.metrics()["train_end_s"] == r.objectives["train_end_s"]
    assert check(p, s, staleness=staleness) == []
    with pytest.raises(InputError, match="stream or sync"):
        replay(p, {**r.plan, "trainer": "planned"})


def test_the_offline_optimum_refuses_several_rounds():
    from pipeplan.solvers.rollout.cpsat import solve_cpsat
    with pytest.raises(InputError, match="one round"):
        solve_cpsat(preset_round("lsat-ar", 4, rounds=2), time_limit=5)
