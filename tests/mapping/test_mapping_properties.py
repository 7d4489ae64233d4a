"""Property tests (hypothesis) of the mapping evaluator and checker on random small DAGs and
random plans."""
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeplan.formulations.mapping.bounds import lower_bounds
from pipeplan.formulations.mapping.checker import violations
from pipeplan.formulations.mapping.evaluator import InfeasiblePlan, evaluate
from pipeplan.formulations.mapping.plan import Plan, Stage, plan_from_assignment
from tests.helpers import tiny_problem

PUS = ("A", "B", "C")


@st.composite
def instances(draw):
    n = draw(st.integers(2, 6))
    edges = [(f"u{i}", f"u{j}") for j in range(1, n) for i in range(j)
             if draw(st.booleans()) or i == j - 1 and draw(st.booleans())]
    # keep unit 0 the source of everything (a single input, as in ONNX graphs)
    for j in range(1, n):
        if not any(b == f"u{j}" for _, b in edges):
            edges.append((f"u{j - 1}", f"u{j}"))
    times = {p: [draw(st.floats(0.1, 9.0)) for _ in range(n)] for p in PUS}
    return tiny_problem(times, edges, transfer=draw(st.floats(0.0, 2.0)),
                        input_ms={p: draw(st.floats(0.0, 2.0)) for p in PUS},
                        output_ms={p: draw(st.floats(0.0, 1.0)) for p in PUS},
                        power_model=draw(st.sampled_from(["board", "per_pu"])),
                        idle={p: draw(st.floats(0.0, 300.0)) for p in PUS})


@st.composite
def instance_and_plan(draw):
    problem = draw(instances())
    names = tuple(u.name for u in problem.units)
    stage_of = {u: draw(st.integers(0, 2)) for u in names}
    pu_of = {u: draw(st.sampled_from(PUS)) for u in names}
    used = sorted(set(stage_of.values()))
    stage_of = {u: used.index(s) for u, s in stage_of.items()}
    return problem, plan_from_assignment(names, stage_of, pu_of, shared_pus=draw(st.booleans()))


@settings(max_examples=150, deadline=None)
@given(instance_and_plan())
def test_checker_agrees_with_the_rules_and_the_evaluator(case):
    """The checker against the rules written out here, not against itself (the evaluator calls
    it: a test audit): every unit runs on its PU, no edge goes back a stage, and stages share no
    PU unless the plan allows it. The evaluator scores exactly the plans the checker passes."""
    problem, plan = case
    prof, place = problem.profile, plan.placement()
    feasible = (all(prof.time(problem.index[u], pu, prof.level(pu, "max")) is not None for u, (_, pu) in place.items())
                and all(place[e.src][0] <= place[e.dst][0] for e in problem.edges)
                and (plan.shared_pus or len({pu for st in plan.stages for pu in st.pus})
                     == sum(len(st.pus) for st in plan.stages)))
    problems = violations(problem, plan)
    assert (problems == []) == feasible, problems
    try:
        evaluate(problem, plan)
        assert not problems
    except InfeasiblePlan as exc:
        assert problems and exc.problems == problems


@settings(max_examples=150, deadline=None)
@given(instance_and_plan())
def test_feasible_plans_respect_the_lower_bounds(case):
    problem, plan = case
    if violations(problem, plan):
        return
    ev = evaluate(problem, plan)
    lb = lower_bounds(problem)
    assert ev.period_ms >= lb["period_ms"] - 1e-9
    assert ev.latency_ms >= lb["latency_ms"] - 1e-9
    assert ev.period_ms <= ev.latency_ms + 1e-9 or plan.shared_pus  # one frame's stages fit in its latency
    assert ev.energy_mj >= 0


@settings(max_examples=100, deadline=None)
@given(instances(), st.integers(0, 5))
def test_moving_a_unit_to_a_faster_pu_never_increases_its_own_time(problem, pick):
    names = tuple(u.name for u in problem.units)
    u = names[pick % len(names)]
    i = problem.index[u]
    times = {p: problem.profile.time(i, p, "max") for p in PUS}
    slow, fast = max(PUS, key=times.get), min(PUS, key=times.get)

    def single_stage(pu_of_u: str) -> Plan:
        order = {p: tuple(v for v in names if (v == u and p == pu_of_u) or (v != u and p == "A")) for p in PUS}
        order = {p: o for p, o in order.items() if o}
        return Plan((Stage(tuple(order), order),))

    a, b = evaluate(problem, single_stage(slow)), evaluate(problem, single_stage(fast))
    assert (b.finish_ms[u] - b.start_ms[u]) <= (a.finish_ms[u] - a.start_ms[u]) + 1e-12
