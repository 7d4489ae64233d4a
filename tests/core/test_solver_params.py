"""Declared solver parameters: ``pipeplan.solve`` refuses what a solver does not declare, before
any work, with an InputError naming the parameter; the same defaults everywhere; and a missing
optional library disables only the solvers whose ``requires`` names it."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pipeplan
from pipeplan.app.bench import plan_runs
from pipeplan.core.errors import InputError
from pipeplan.core.registry import get_solver, solvers
from pipeplan.core.vocabulary import MAPPING_AXES, SYSTEMS
from tests.helpers import tiny_problem

TINY = tiny_problem({"A": [1.0, 2.0], "B": [2.0, 1.0]}, transfer=0.1)


def test_unknown_parameter_is_refused_naming_it():
    with pytest.raises(InputError) as err:
        pipeplan.solve(TINY, "heft", objctive="latency")
    assert err.value.field == "objctive" and "objective='period'" in err.value.message


def test_a_solver_that_cannot_honour_a_value_says_so():
    with pytest.raises(InputError) as err:
        pipeplan.solve(TINY, "pipeline-dp", objective="latency")
    assert err.value.field == "objective" and "'period'" in err.value.message
    with pytest.raises(InputError, match="shared_pus"):
        pipeplan.solve(TINY, "milp", shared_pus=True)
    with pytest.raises(InputError, match="warm start"):
        pipeplan.solve(TINY, "heft", warm_start=object())


@pytest.mark.solvers("mapping")
def test_every_mapping_solver_defaults_to_the_period(solver):
    info = get_solver("mapping", solver)
    assert info.params["objective"].default == "period"
    r = pipeplan.solve(TINY, solver, time_limit=10)
    assert r.params["objective"] == "period" and r.plan is not None


def test_objective_choices_come_from_the_vocabulary():
    for s in solvers("mapping"):
        choices = s.params["objective"].choices
        assert choices and set(choices) <= set(MAPPING_AXES)


def test_no_solver_swallows_keywords():
    for system in SYSTEMS:
        for s in solvers(system):
            assert all(p.name.isidentifier() for p in s.params.values())
            with pytest.raises(InputError) as err:
                s.check_params({"surely_not_a_parameter": 1})
            assert err.value.field == "surely_not_a_parameter" and err.value.source == f"solver {system}/{s.name}"
            assert f"{s.name} has no parameter of this name" in err.value.message


def test_bench_suite_parameters_are_checked_when_the_suite_is_planned():
    suite = {"mapping": [{"instances": ["khadas-vim3/SqueezeV1"], "solvers": ["heft", "cpsat"], "params": {"tie_break": None}}]}
    with pytest.raises(InputError) as err:
        plan_runs(suite, source="my.toml")
    assert err.value.source == "my.toml: mapping[0].params" and err.value.field == "tie_break"


def test_every_declared_parameter_has_its_values_declared():
    """Each solver parameter besides the common options has a Literal or a ``VALUES`` entry
    (so the suite planner can check it), and its default passes that check."""
    from pipeplan.core.registry import COMMON
    for s in solvers():
        for name, p in s.params.items():
            if name not in COMMON:
                assert p.choices is not None or p.values is not None, f"{s.kind}/{s.name}: {name}"
                assert p.fault(p.default) is None, f"{s.kind}/{s.name}: {name}={p.default!r}"


@pytest.mark.parametrize("system, instance, solver, params", [
    ("rollout", "rollout/tiny-0", "fgd-soft", {"frontier": 0}),
    ("rollout", "rollout/tiny-0", "fifo", {"staleness": -3}),
    ("rollout", "rollout/tiny-0", "cpsat", {"work_limit": -1}),
    ("rollout", "rollout/tiny-0", "step-plan", {"prove_s": float("nan")}),
    ("rollout", "rollout/tiny-0", "slack", {"alpha": 1.5}),
    ("rollout", "rollout/tiny-0", "defer", {"held": "some"}),
    ("rollout", "rollout/tiny-0", "cpsat", {"time_unit_s": 1e-300}),
    ("rollout", "rollout/tiny-0", "cpsat-lns", {"part_s": float("inf")}),
    ("gradcode", "gradcode/homog-n12-s1", "general", {"scenarios": 0}),
    ("gradcode", "gradcode/homog-n12-s1", "milp", {"node_limit": 10**12}),
    ("gradcode", "gradcode/homog-n12-s1", "cr", {"tries": "8"}),
    ("mapping", "khadas-vim3/SqueezeV1", "cpsat", {"work_limit": float("nan")}),
    ("mapping", "khadas-vim3/SqueezeV1", "nsga2", {"pop_size": 2.5}),
    ("mapping", "khadas-vim3/SqueezeV1", "cpsat", {"bounds": {"latency_ms": float("inf")}}),
    ("mapping", "khadas-vim3/SqueezeV1", "single", {"freq": "fastest"}),
    ("multi", "multi/*", "nsga2", {"max_evaluations": 0}),
    ("multi", "multi/*", "cpsat", {"work_limit": 10**400}),
])
def test_bench_suite_parameter_values_are_checked_when_the_suite_is_planned(system, instance, solver, params):
    """A value a solver would refuse once running (or, as prove_s = nan, ignore) is refused up
    front, for every system, naming the suite, the group and the parameter."""
    suite = {system: [{"instances": [instance], "solvers": [solver], "params": params}]}
    with pytest.raises(InputError) as err:
        plan_runs(suite, source="my.toml")
    assert err.value.source == f"my.toml: {system}[0].params" and err.value.field == next(iter(params))
    assert "\n" not in err.value.one_line() and len(err.value.one_line()) < 300
    with pytest.raises(InputError) as direct:          # pipeplan.solve checks the same way
        get_solver(system, solver).check_params(params)
    assert direct.value.field == err.value.field and direct.value.message == err.value.message


def test_shipped_suites_parameters_pass_the_check():
    from pipeplan.app.bench import load_suite
    for name in ("quick", "full"):
        assert plan_runs(load_suite(name)[1])


@pytest.mark.parametrize("blocked,gone,kept", [
    (("ortools",), {"mapping/cpsat", "gradcode/cpsat", "rollout/cpsat"}, {"mapping/heft", "mapping/milp", "rollout/cgp"}),
    (("pulp", "highspy"), {"mapping/milp", "gradcode/milp"}, {"mapping/cpsat", "mapping/heft", "gradcode/fr"}),
    (("pymoo",), {"mapping/nsga2"}, {"mapping/heft", "mapping/cpsat"}),
])
def test_a_missing_library_disables_only_its_solvers(blocked, gone, kept):
    """In a fresh interpreter where ``blocked`` cannot be imported: the registries load, the
    solvers needing it are unavailable (with the reason), the others still solve."""
    script = textwrap.dedent(f"""
        import sys, json
        for name in {blocked!r}:
            sys.modules[name] = None            # import of it raises ImportError
        import pipeplan
        from pipeplan.core.registry import solvers
        from pipeplan.instances.catalog import load_mapping
        state = {{f"{{s.kind}}/{{s.name}}": s.available() for s in solvers()}}
        heft = pipeplan.solve(load_mapping("khadas-vim3/SqueezeV1"), "heft")
        print(json.dumps({{"state": state, "heft": heft.termination.value}}))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    import json
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in gone:
        ok, why = out["state"][name]
        assert not ok and any(b in why for b in blocked), (name, why)
    for name in kept:
        assert out["state"][name][0], name
    assert out["heft"] == "completed"


@pytest.mark.parametrize("options, named", [
    ({"time_limit": 10**400}, "--time-limit"), ({"time_limit": -10**400}, "--time-limit"),   # OverflowError
    ({"seed": None}, "--seed"),                  # passed the check, then failed inside ten solvers
    ({"objective": np.array([1, 2])}, "objective"),   # ValueError: an array's truth value
])
def test_the_facade_refuses_what_had_escaped_its_check(options, named):
    """Found by a hostile-input audit: each had raised another exception than InputError, or
    passed the check and failed inside the solver."""
    from pipeplan.instances.catalog import load_mapping
    with pytest.raises(InputError) as info:
        pipeplan.solve(load_mapping("khadas-vim3/Alex"), "heft", **options)
    assert named in (info.value.source, info.value.field)
    assert len(str(info.value)) < 300


@pytest.mark.parametrize("call, named", [
    (lambda P: pipeplan.solve(None, "heft"), "problem"),        # had been an AttributeError
    (lambda P: pipeplan.solve(P, ["heft"]), "solver")])          # had been a TypeError
def test_the_facade_names_a_wrong_problem_or_solver(call, named):
    from pipeplan.instances.catalog import load_mapping
    with pytest.raises(InputError) as info:
        call(load_mapping("khadas-vim3/Alex"))
    assert info.value.source == named


@pytest.mark.parametrize("solver, params", [("milp", {"node_limit": np.int64(5)}),
                                            ("nsga2", {"max_evaluations": np.int64(50)}),
                                            ("nsga2", {"seed": np.int64(1), "threads": np.int32(1)})])
def test_a_numpy_scalar_parameter_is_its_number(solver, params):
    """np.int64(5) had passed the declared check, then failed the solver's own test as no int:
    an error result. It is the number it holds."""
    from pipeplan.instances.catalog import load_mapping
    result = pipeplan.solve(load_mapping("khadas-vim3/Alex"), solver, time_limit=10, **params)
    assert result.termination.value != "error", result.message
    assert result.plan is not None


@pytest.mark.parametrize("given, says", [(5, "expected a Plan"), ({"stages": 5}, "stages"),
                                         ("other network", "not a valid plan")])
def test_a_warm_start_is_a_plan_of_the_problem(given, says):
    """Found by a hostile-input audit: a wrong warm start ended as an error result naming an
    AttributeError from inside the solver. It is refused before the solver runs."""
    from pipeplan.instances.catalog import load_mapping
    alex = load_mapping("khadas-vim3/Alex")
    if given == "other network":
        given = pipeplan.solve(load_mapping("khadas-vim3/Google"), "heft").plan
    with pytest.raises(InputError) as info:
        pipeplan.solve(alex, "cpsat", time_limit=5, warm_start=given)
    assert info.value.source == "warm_start" and says in str(info.value)


def test_a_result_plan_is_a_warm_start():
    """``result.plan`` (a dictionary) is taken as a warm start, as the CLI takes a plan file:
    it had failed inside the solver. The exact solver still proves its optimum from it."""
    from pipeplan.instances.catalog import load_mapping
    alex = load_mapping("khadas-vim3/Alex")
    start = pipeplan.solve(alex, "heft").plan
    result = pipeplan.solve(alex, "cpsat", time_limit=30, warm_start=start)
    assert result.termination.value == "optimal", result.message
    assert result.objectives["period_ms"] <= pipeplan.solve(alex, "heft").objectives["period_ms"] + 1e-9
