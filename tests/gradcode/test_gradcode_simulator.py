"""Simulator and evaluator: the vectorised stopping rule against the one-step rule, the exact
worst case against enumeration, the straggler models' statistics, and bad problem data."""
import itertools
import math
from dataclasses import replace

import numpy as np
import pytest

from pipeplan.core.errors import InputError
from pipeplan.formulations.gradcode.decoders import needed_replies
from pipeplan.formulations.gradcode.delays import DelaySampler
from pipeplan.formulations.gradcode.evaluator import evaluate
from pipeplan.formulations.gradcode.problem import GradCodeProblem, homogeneous_problem, problem_from_dict
from pipeplan.formulations.gradcode.simulator import StepRule, compute_times, simulate_step_times, worst_case_step_time
from pipeplan.formulations.gradcode.straggler import StragglerModel, load_trace
from pipeplan.instances.gradcode import heterogeneous_problem, instance_names, load_instance
from pipeplan.solvers.gradcode.cyclic import cyclic_repetition
from pipeplan.solvers.gradcode.fractional import fractional_repetition
from pipeplan.solvers.gradcode.pipelining import pgc_fr
from pipeplan.solvers.gradcode.schemes import build


@pytest.mark.parametrize("scheme", ["fr", "cr", "pgc-fr", "uncoded", "ignore-sgd"])
def test_vectorised_rule_equals_reply_by_reply_rule(scheme):
    code = build(scheme, 6, 2)
    T = np.random.default_rng(1).exponential(1.0, size=(200, 6))
    fast = StepRule(code)(T)
    for t in range(200):
        order = np.argsort(T[t])
        assert fast[t] == T[t, order[needed_replies(code, order) - 1]]


def _brute_worst(problem, code):
    """Stragglers never reply: the latest step over every straggler set of size s."""
    c = compute_times(problem, code)
    worst = 0.0
    for dead in itertools.combinations(range(code.n), code.s):
        T = c.copy()
        T[list(dead)] = np.inf
        worst = max(worst, float(StepRule(code)(T[None, :])[0]))
    return worst


@pytest.mark.parametrize("scheme", ["fr", "cr", "pgc-fr", "pgc-cr"])
@pytest.mark.parametrize("s", [1, 2])
def test_worst_case_matches_enumeration(scheme, s):
    problem = heterogeneous_problem("t", s, pattern="ABCBAC")
    code = build(scheme, 6, s)
    assert worst_case_step_time(problem, code) == pytest.approx(_brute_worst(problem, code))


def test_step_times_on_a_hand_example():
    problem = replace(homogeneous_problem(4, 1, straggler=StragglerModel(kind="none")), speeds=(1.0, 2.0, 1.0, 0.5))
    fr = fractional_repetition(4, 1)    # groups {0,1}, {2,3}; 2 partitions each at 0.5 s
    assert list(compute_times(problem, fr)) == [1.0, 0.5, 1.0, 2.0]
    assert simulate_step_times(problem, fr, 3).tolist() == [1.0, 1.0, 1.0]   # max(min(1, .5), min(1, 2))
    assert worst_case_step_time(problem, fr) == 2.0
    pgc = pgc_fr(4, 1)
    assert simulate_step_times(problem, pgc, 2).tolist() == [0.5, 0.5]
    assert evaluate(problem, pgc).max_staleness == 1


def test_exponential_and_shifted_delays_have_the_stated_means():
    rng = np.random.default_rng(0)
    for model, mean in ((StragglerModel(kind="exponential", mean_s=2.0), 0.3 * 2.0),
                        (StragglerModel(kind="shifted-exponential", mean_s=1.0, shift_s=0.5), 0.3 * 1.5)):
        D = DelaySampler(model, [0.3] * 50, rng).next(4000)
        assert D.mean() == pytest.approx(mean, rel=0.03)
        assert ((D > 0).mean()) == pytest.approx(0.3, abs=0.01)


@pytest.mark.parametrize("model", [StragglerModel(kind="exponential", mean_s=0.37),
                                   StragglerModel(kind="shifted-exponential", mean_s=0.8, shift_s=0.25),
                                   StragglerModel(kind="exponential", mean_s=0.0)])
def test_delays_are_the_stream_of_a_straggling_draw_then_rng_exponential(model):
    """Stored results are reproducible only if the draws stay those of the first sampler:
    per chunk the straggling flags, then ``rng.exponential(mean_s)`` kept where a worker straggles."""
    p = np.linspace(0.0, 1.0, 13)
    got = DelaySampler(model, p, np.random.default_rng(4))
    got = np.concatenate([got.next(50), got.next(70)])
    rng, want = np.random.default_rng(4), []
    for steps in (50, 70):
        straggling = rng.random((steps, p.size)) < p
        extra = rng.exponential(model.mean_s, size=(steps, p.size)) if model.mean_s > 0 else np.zeros((steps, p.size))
        want.append(np.where(straggling, extra + model.shift_s, 0.0))
    assert np.array_equal(got, np.concatenate(want))


def test_pareto_delays_are_heavy_tailed_above_the_scale():
    D = DelaySampler(StragglerModel(kind="pareto", scale_s=0.5, alpha=1.5), [1.0] * 20,
                     np.random.default_rng(0)).next(20000)
    assert D.min() >= 0.5
    assert np.median(D) == pytest.approx(0.5 * 2 ** (1 / 1.5), rel=0.03)   # Pareto median x_m 2^(1/alpha)
    assert D.max() > 50 * np.median(D)


def test_markov_stragglers_persist_and_keep_their_share():
    sampler = DelaySampler(StragglerModel(kind="markov", mean_s=1.0, stay=0.95), [0.2] * 40, np.random.default_rng(3))
    flags = np.vstack([sampler.next(700), sampler.next(1300)]) > 0     # two chunks: the chain carries over
    assert flags.mean() == pytest.approx(0.2, abs=0.02)
    was = flags[:-1]
    assert (flags[1:][was]).mean() == pytest.approx(0.95, abs=0.01)          # stays a straggler
    assert (flags[1:][~was]).mean() == pytest.approx(0.2 * 0.05 / 0.8, abs=0.004)


def test_trace_replay_cycles_exactly(tmp_path):
    f = tmp_path / "trace.csv"
    f.write_text("w0,w1,w2\n0.5,0,1\n0,2,0\n")
    model = StragglerModel(kind="trace", trace_file=str(f), trace=load_trace(f))
    problem = homogeneous_problem(3, 1, k=3, capacity=3, straggler=model)
    D = DelaySampler(model, problem.straggle_prob, np.random.default_rng(0))
    assert np.vstack([D.next(3), D.next(2)]).tolist() == [[0.5, 0, 1], [0, 2, 0], [0.5, 0, 1], [0, 2, 0], [0.5, 0, 1]]


@pytest.mark.parametrize("content,needle", [("", "no data rows"), ("1,2\n3\n", "columns"), ("1,-2\n", ">= 0"),
                                            ("1,nan\n", "line 1: column 2: not a finite number"), ("a,b\n1,x\n", "not a number")])
def test_bad_traces_raise_input_error(tmp_path, content, needle):
    f = tmp_path / "t.csv"
    f.write_text(content)
    with pytest.raises(InputError, match=needle):
        load_trace(f)
    with pytest.raises(InputError, match="cannot read"):
        load_trace(tmp_path / "missing.csv")


def test_bad_problem_data():
    with pytest.raises(InputError, match="s = 4 >= n = 4"):
        problem_from_dict({"n": 4, "s": 4})
    with pytest.raises(InputError, match=r"speeds\[1\]"):
        problem_from_dict({"n": 3, "s": 1, "speeds": [1, -2, 1]})
    with pytest.raises(InputError, match="straggle_prob"):
        problem_from_dict({"n": 2, "s": 1, "straggle_prob": [0.1, 1.5]})
    with pytest.raises(InputError, match="unknown straggler model"):
        problem_from_dict({"n": 2, "s": 1, "straggler": {"kind": "gamma"}})
    with pytest.raises(InputError, match="3 values"):
        GradCodeProblem("x", 2, 1, 2, (1.0, 1.0, 1.0), (0.1, 0.1), (2, 2))


def test_catalogue_loads_and_round_trips():
    for name in instance_names():
        p = load_instance(name)
        assert p.name == name
        assert problem_from_dict(p.to_dict()) == replace(p, source="problem")
    with pytest.raises(InputError, match="unknown gradcode instance"):
        load_instance("gradcode/none")


def test_evaluator_is_deterministic_and_uses_the_problems_workers():
    hetero = load_instance("gradcode/hetero-n12-s2")
    homog = load_instance("gradcode/homog-n12-s2")
    cr = cyclic_repetition(12, 2)
    a, b = evaluate(hetero, cr), evaluate(hetero, cr)
    assert a == b
    assert evaluate(homog, cr).expected_step_s < a.expected_step_s        # slow workers hurt CR
    assert math.isclose(a.worst_step_s, 3.0)                               # 3 partitions on a 0.5-speed worker


def test_stratified_delays_match_the_model_closely():
    from pipeplan.formulations.gradcode.delays import stratified_delays
    model = StragglerModel(kind="exponential", mean_s=2.0)
    D = stratified_delays(model, [0.25, 0.5], 64, np.random.default_rng(0))
    assert ((D > 0).sum(axis=0) == [16, 32]).all()                  # exactly p * count stragglers
    assert D[:, 1].sum() / 32 == pytest.approx(2.0, rel=0.1)
    with pytest.raises(ValueError, match="stratified sampling needs an independent model, not 'markov'"):
        stratified_delays(StragglerModel(kind="markov"), [0.2], 8, np.random.default_rng(0))
