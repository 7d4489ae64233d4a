"""Workers as queues, communication and decoding time (``queueing``): hand-computed step times,
the historical model unchanged when the options are off, monotonicity, and bad input."""
import json
from dataclasses import replace

import numpy as np
import pytest

from pipeplan.core.errors import InputError
from pipeplan.deploy.gradcode.training import StepClock, arrival_order, train_simulated
from pipeplan.formulations.gradcode.decoders import needed_replies
from pipeplan.formulations.gradcode.delays import DelaySampler
from pipeplan.formulations.gradcode.gradient_code import code_from_dict
from pipeplan.formulations.gradcode.problem import homogeneous_problem, problem_from_dict
from pipeplan.formulations.gradcode.queueing import WorkerQueues, fifo_arrivals, replies_combined, step_costs
from pipeplan.formulations.gradcode.simulator import StepRule, compute_times, simulate_step_times
from pipeplan.formulations.gradcode.straggler import StragglerModel
from pipeplan.solvers.gradcode.schemes import build
from tests.cli_helpers import assert_input_error, run_cli


def traced(n, s, rows, **changes):
    """n homogeneous workers whose delays are the given rows, one per step."""
    model = StragglerModel(kind="trace", trace=tuple(tuple(map(float, r)) for r in rows), trace_file="hand")
    return replace(homogeneous_problem(n, s, straggler=model), **changes)


# gc-cr with n = 3, s = 1: every worker computes 2 partitions (1.0 s), the master waits for 2 replies
CR3 = build("gc-cr", 3, 1)
# full replication, n = 3, s = 2: every worker holds all 3 partitions, the master waits for 1 reply
REP3 = code_from_dict({"support": [[1, 1, 1]] * 3, "s": 2, "wait": 1})


def test_busy_carry_over_and_the_skip_rule_by_hand():
    # step 0: worker 2 straggles 3 s, busy until 4; step 1: worker 1 straggles 2 s; step 2: worker 1 straggles 5 s
    problem = traced(3, 1, [(0, 0, 3), (0, 2, 0), (0, 5, 0)])
    assert simulate_step_times(problem, CR3, 3).tolist() == [1.0, 1.0, 1.0]   # 2nd of (1,1,4), (1,3,1), (1,6,1)
    carry = replace(problem, carry_over=True)
    # step 1 starts at 1: worker 2 is busy until 4 (3 s into the step), replies (1, 3, 4) -> 3;
    # it is free only when step 1 is decoded, skips it and is free for step 2: (1, 6, 1) -> 1
    # (had it done step 1's request, busy to 4 + 1 = 5, step 2 would be 2nd of (1, 6, 2) = 2)
    assert simulate_step_times(carry, CR3, 3).tolist() == [1.0, 3.0, 1.0]
    queues = WorkerQueues(carry, CR3, step_costs(carry, CR3))
    working = [queues.step(compute_times(carry, CR3), np.array(row, dtype=float)).working.tolist()
               for row in carry.straggler.trace]
    assert working == [[True, True, True], [True, True, False], [True, True, True]]
    run = train_simulated(carry, CR3, steps=3)
    assert run.time_s == [0.0, 1.0, 4.0, 5.0] and run.skipped_work == 1
    assert run.survivors[1] == [0, 1]


def test_broadcast_incast_and_decode_by_hand():
    # 1 MB at 10 MB/s: a reply takes 0.1 s, the broadcast 2 (n-1)/n x 0.1 = 0.1333 s; decoding 0.05 s x 2 replies
    problem = traced(3, 1, [(0, 0, 0)], gradient_mb=1.0, link_mb_per_s=10.0, decode_s_per_reply=0.05)
    costs = step_costs(problem, CR3)
    assert costs.broadcast_s == pytest.approx(0.4 / 3) and costs.reply_s == pytest.approx(0.1)
    assert costs.decode_s == pytest.approx(0.1) and replies_combined(CR3) == 2
    # all ready at 0.1333 + 1; they arrive 0.1 apart; the 2nd at 1.3333; decoded at 1.4333
    assert simulate_step_times(problem, CR3, 2) == pytest.approx([1.4 + 1 / 30] * 2)
    assert simulate_step_times(replace(problem, carry_over=True), CR3, 2) == pytest.approx([1.4 + 1 / 30] * 2)
    fr = build("gc-fr", 4, 1)    # groups {0, 1}, {2, 3}: the master combines one reply per group
    assert replies_combined(fr) == 2
    assert simulate_step_times(traced(4, 1, [(0, 0, 0, 0)], decode_s_per_reply=0.05), fr, 1) == pytest.approx([1.1])


def test_the_link_backlog_carries_into_the_next_step():
    # 10 MB at 10 MB/s: 1 s per reply, broadcast 4/3 s; 3 partitions of 0.1 s: ready at 4/3 + 0.3;
    # the first of three arrives at 2.6333 and ends the step, the other two hold the link 2 s more
    problem = traced(3, 2, [(0, 0, 0)], gradient_mb=10.0, link_mb_per_s=10.0, partition_time_s=0.1)
    first = 4 / 3 + 0.3 + 1
    assert simulate_step_times(problem, REP3, 3) == pytest.approx([first] * 3)
    # with carry-over the link is busy until 2 s into the next step: its first reply arrives at 2 + 1
    assert simulate_step_times(replace(problem, carry_over=True), REP3, 3) == pytest.approx([first, 3.0, 3.0])


def test_fifo_arrivals_follow_the_recurrence():
    rng = np.random.default_rng(1)
    ready = np.round(rng.exponential(1.0, size=(50, 7)), 1)     # ties included
    ready[3, 2] = np.inf
    got = fifo_arrivals(ready, 0.3, 0.5)
    for row, out in zip(ready, got):
        link = 0.5
        for i in np.argsort(row, kind="stable"):
            link = max(row[i], link) + 0.3
            assert out[i] == pytest.approx(link)


@pytest.mark.parametrize("kind", ["exponential", "pareto", "markov"])
@pytest.mark.parametrize("scheme", ["gc-fr", "gc-cr", "pgc-fr", "ignore-sgd"])
def test_options_off_is_the_historical_model_exactly(kind, scheme):
    problem = homogeneous_problem(12, 2, straggler=StragglerModel(kind=kind))
    code = build(scheme, 12, 2)
    sampler = DelaySampler(problem.straggler, problem.straggle_prob, np.random.default_rng(5))
    historical = StepRule(code)(sampler.next(3000) + compute_times(problem, code))
    assert np.array_equal(simulate_step_times(problem, code, 3000, seed=5), historical)


@pytest.mark.parametrize("scheme", ["gc-fr", "gc-cr", "pgc-fr", "pgc-cr"])
def test_training_with_options_off_is_the_historical_model_exactly(scheme):
    problem = homogeneous_problem(12, 2)
    code = build(scheme, 12, 2)
    run = train_simulated(problem, code, steps=12, seed=3)
    clock = StepClock(problem, code, 12, 3)
    survivors, times = [], []
    for t in range(12):   # the historical rule: the needed first replies in arrival order, the step their slowest
        order = arrival_order(clock.reply_times(t))
        survivors.append([int(x) for x in order[:needed_replies(code, order)]])
        times.append(float(clock.reply_times(t)[survivors[-1]].max()))
    assert run.survivors == survivors and run.skipped_work == 0
    assert np.array_equal(run.time_s[1:], np.cumsum(times))
    if not code.pipelined:
        assert np.array_equal(run.time_s[1:], np.cumsum(simulate_step_times(problem, code, 12, seed=3)))
    assert train_simulated(problem, code, steps=12, seed=3, replay=survivors).loss == run.loss


@pytest.mark.parametrize("scheme,comm", [("gc-fr", False), ("pgc-fr", False), ("gc-cr", True), ("pgc-cr", True),
                                         ("ignore-sgd", True)])
@pytest.mark.parametrize("kind", ["exponential", "pareto"])
def test_carry_over_never_ends_a_step_earlier(scheme, comm, kind):
    """Same delays: a busy worker starts later, so every step lasts at least as long. With a
    link this holds for the count rule (the wait-th arrival is monotone in the ready times), not
    for the groups rule, where a busy worker can leave the link to a needed reply."""
    timing = {"gradient_mb": 30.0, "link_mb_per_s": 1000.0} if comm else {}
    problem = replace(homogeneous_problem(12, 3, straggler=StragglerModel(kind=kind), prob=0.3), **timing,
                      decode_s_per_reply=0.01)
    code = build(scheme, 12, 3)
    off = simulate_step_times(problem, code, 3000, seed=2)
    on = simulate_step_times(replace(problem, carry_over=True), code, 3000, seed=2)
    assert np.all(on >= off - 1e-12)
    assert on.mean() > off.mean()


def test_training_follows_the_simulator_with_carry_over_and_communication():
    problem = replace(homogeneous_problem(12, 2), carry_over=True, gradient_mb=40.0, link_mb_per_s=1250.0,
                      decode_s_per_reply=0.007)
    code = build("gc-cr", 12, 2)
    run = train_simulated(problem, code, steps=25, seed=1)
    assert np.allclose(np.diff(run.time_s), simulate_step_times(problem, code, 25, seed=1))
    assert run.skipped_work > 0


def test_training_charges_the_model_size_when_the_gradient_size_is_unset():
    problem = traced(3, 1, [(0, 0, 0)], link_mb_per_s=0.001)      # 1 kB/s
    run = train_simulated(problem, CR3, steps=1)
    size = 64 * 10 + 10                                           # softmax on the digits, float64
    reply = size * 8 / 1e6 / 0.001
    assert run.time_s[1] == pytest.approx(4 / 3 * reply + 1.0 + 2 * reply)


@pytest.mark.parametrize("field,value", [("link_mb_per_s", -1.0), ("gradient_mb", float("nan")),
                                         ("decode_s_per_reply", float("inf")), ("gradient_mb", True),
                                         ("carry_over", "yes"), ("carry_over", 1)])
def test_bad_timing_fields_name_the_field(field, value):
    with pytest.raises(InputError) as err:
        problem_from_dict({"n": 4, "s": 1, field: value}, "p.json")
    assert err.value.field == field and err.value.source == "p.json"


def test_timing_fields_round_trip_and_link_needs_a_size():
    p = replace(homogeneous_problem(4, 1), carry_over=True, link_mb_per_s=100.0, gradient_mb=2.5,
                decode_s_per_reply=0.01)
    assert problem_from_dict(p.to_dict()) == replace(p, source="problem")
    assert "carry_over" not in homogeneous_problem(4, 1).to_dict()
    with pytest.raises(InputError) as err:
        simulate_step_times(replace(p, gradient_mb=0.0), build("gc-fr", 4, 1), 10)
    assert err.value.field == "gradient_mb"


def test_cli_simulate_with_timing_and_bad_option():
    ok = run_cli("gradcode", "simulate", "--scheme", "gc-cr", "--n", 12, "--s", 2, "--steps", 2000, "--carry-over",
                 "--link-mb-per-s", 1250, "--gradient-mb", 46.8, "--decode-s-per-reply", 0.007, "--json")
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["carry_over"] is True and doc["gradient_mb"] == 46.8
    bad = run_cli("gradcode", "simulate", "--scheme", "gc-cr", "--n", 12, "--s", 2, "--link-mb-per-s", -3)
    assert_input_error(bad, "--link-mb-per-s")
