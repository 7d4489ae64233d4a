"""``pipeplan limits``: which runs it plans, how it reports refusals, and that a run past its
kill time is stopped and recorded (the run is a real solver process, killed for real)."""
from pipeplan.app import limits
from pipeplan.core.registry import solvers as registered


def test_every_solver_runs_each_size_under_each_limit_it_takes():
    runs = limits.plan(["rollout", "multi"], (3.0, 30.0))
    for system in ("rollout", "multi"):
        for info in registered(system):
            under = {limit for s, name, _, limit in runs if (s, name) == (system, info.name)}
            assert under == ({3.0, 30.0} if "time_limit" in info.params else {3.0}), info.name
            sizes = [size for s, name, size, limit in runs if (s, name, limit) == (system, info.name, 3.0)]
            assert sizes == list(limits.SIZES[system])
    assert ("rollout", "sync", 96, 3.0) in runs and ("rollout", "sync", 96, 30.0) not in runs


def test_a_run_past_its_kill_time_is_killed_and_misses_the_goal(monkeypatch):
    monkeypatch.setattr(limits, "kill_after", lambda limit: 0.5)
    run = limits.measure("mapping", "cpsat", 2_000, 3.0)
    assert run.termination == "killed" and not run.ok
    text = limits.report([run])
    assert "**0 of 1 runs meet the goal**" in text and "## Runs that miss the goal" in text
    assert "mapping cpsat size 2,000, limit 3 s" in text and "killed after" in text


def test_a_refusal_holds_its_limit_and_is_listed_with_its_reason():
    run = limits.measure("multi", "cpsat", 30, 3.0)
    assert run.termination == "error" and run.ok and "variant combinations" in run.note
    text = limits.report([run])
    assert "**1 of 1 runs meet the goal**" in text and "## Runs that refused the instance" in text
