"""The Ray backend on a local one-node Ray (2 CPUs, 4 worker actors, a few steps), with
non-blocking stragglers (``straggle="sleep"``: a straggler is never busy, its next reply is on
time) and blocking ones under the groups rule; late replies are dropped, the master waits only
until it can decode, and its updates are the simulated backend's (replaying the survivors Ray
saw gives the same losses). Trace delays far apart make every outcome exact. The count rule
with blocking stragglers on a multi-node cluster: test_gradcode_ray_cluster.py."""
import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (extra pipeplan[ray]; CI installs it)")

from pipeplan.deploy.gradcode.ray_backend import train_ray  # noqa: E402
from pipeplan.deploy.gradcode.training import train_simulated  # noqa: E402
from pipeplan.formulations.gradcode.decoders import needed_replies  # noqa: E402
from pipeplan.formulations.gradcode.problem import homogeneous_problem  # noqa: E402
from pipeplan.formulations.gradcode.straggler import StragglerModel  # noqa: E402
from pipeplan.solvers.gradcode.schemes import build  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        yield
    finally:
        ray.shutdown()


def trace_problem(rows, partition_time_s: float):
    return homogeneous_problem(len(rows[0]), 1, partition_time_s=partition_time_s,
                               straggler=StragglerModel(kind="trace", trace=rows))


def test_sleeping_stragglers_are_never_busy(local_ray):
    # PGC-CR, n = 4, s = 1: the first 3 replies. Reply times 0.4 s in step 0 (both partitions),
    # then 0.2 s; worker t+1 is 1.5 s late in step t. Steps end at 0.4, 0.6, 0.8, and each
    # late reply (1.9, 2.1, 2.3) is still out at the end. Worker 1, late in step 0, replies on
    # time in step 1: sleeping out its delay does not keep it from the next step's work.
    rows = ((0.0, 1.5, 0.0, 0.0), (0.0, 0.0, 1.5, 0.0), (0.0, 0.0, 0.0, 1.5))
    problem = trace_problem(rows, 0.2)
    code = build("pgc-cr", 4, 1)
    steps = 3
    run = train_ray(problem, code, steps=steps, time_scale=1.0, straggle="sleep")
    assert run.backend == "ray" and run.straggle == "sleep" and len(run.loss) == steps + 1
    assert [sorted(x) for x in run.survivors] == [[0, 2, 3], [0, 1, 3], [0, 1, 2]]
    assert run.late == [[], [], []] and run.still_out == [[1], [2], [3]] and run.dropped_replies == 3
    assert run.arrivals == run.survivors
    assert np.allclose(run.time_s, [0.0, 0.4, 0.6, 0.8])
    again = train_simulated(problem, code, steps=steps, replay=run.survivors)
    assert np.allclose(again.loss, run.loss, rtol=1e-12, atol=0)
    assert np.allclose(again.time_s, run.time_s)
    assert run.loss[-1] < run.loss[0]


def test_blocking_stragglers_under_the_groups_rule(local_ray):
    # PGC-FR, n = 4, s = 1: groups (0, 1) and (2, 3); the master waits for a reply of each.
    # Reply times 0.4 s in step 0, then 0.2 s. Delays: step 0 worker 1 +10 s (busy all run) and
    # worker 3 +1 s, step 1 worker 2 +2.5 s. Blocking workers' replies:
    #   step 0 [0, 0.4]:   0, 2 at 0.4; 3 at 1.4                       -> 0, 2; ends 0.4
    #   step 1 [0.4, 1.6]: 0 at 0.6; 2 at 3.1; 3 busy to 1.4 -> 1.6 (its step-0 reply, dropped,
    #                      comes first): group (2, 3) waits for 3            -> 0, 3; ends 1.6
    #   step 2 [1.6, 1.8]: 0, 3 at 1.8; 2 busy to 3.1 -> 3.3              -> 0, 3; ends 1.8
    #   step 3 [1.8, 2.0]: 0, 3 at 2.0; 2 at 3.5                         -> 0, 3; ends 2.0
    rows = ((0.0, 10.0, 0.0, 1.0), (0.0, 0.0, 2.5, 0.0), (0.0,) * 4, (0.0,) * 4)
    problem = trace_problem(rows, 0.2)
    code = build("pgc-fr", 4, 1)
    steps = 4
    run = train_ray(problem, code, steps=steps, time_scale=1.0)
    assert run.straggle == "blocking"
    seen = f"survivors {run.survivors}, late {run.late}, still out {run.still_out}"
    assert [sorted(x) for x in run.survivors] == [[0, 2], [0, 3], [0, 3], [0, 3]], seen
    assert run.late == [[3], [], [], []] and run.arrivals[0] == run.survivors[0] + [3], seen
    assert [sorted(x) for x in run.still_out] == [[1], [1, 2], [1, 2], [1, 2]], seen
    assert run.dropped_replies == 1 + 7
    assert np.allclose(run.time_s, [0.0, 0.4, 1.6, 1.8, 2.0])
    for t in range(steps):
        assert run.survivors[t] == run.arrivals[t][:needed_replies(code, run.arrivals[t])]
        assert sorted(run.arrivals[t] + run.still_out[t]) == [0, 1, 2, 3]
    again = train_simulated(problem, code, steps=steps, replay=run.survivors)
    assert np.allclose(again.loss, run.loss, rtol=1e-12, atol=0)


def test_unknown_straggle_mode_is_refused():
    with pytest.raises(ValueError, match="straggle"):
        train_ray(homogeneous_problem(4, 1), build("pgc-fr", 4, 1), straggle="busy")


def test_a_diverging_run_stops_with_its_step(local_ray):
    """A learning rate far too large: the loss leaves the finite numbers and the run stops
    there (``Diverged``, which the CLI turns into ``error: --lr: training diverged``), as the
    simulated backend does, instead of training on to a NaN summary. With no delays the replies
    race, so which ones a step uses (and with the pipelined stores, the step the loss overflows)
    varies from run to run: the simulated replay of the Ray run's survivors diverges at its step."""
    from pipeplan.deploy.gradcode.training import Diverged
    problem = trace_problem(((0.0, 0.0, 0.0, 0.0),) * 3, 0.01)
    code = build("pgc-cr", 4, 1)
    with pytest.raises(Diverged) as ray_run:
        train_ray(problem, code, steps=3, lr=1e308, time_scale=0.0, straggle="sleep")
    diverged = ray_run.value
    assert 1 <= diverged.step <= 3 and len(diverged.survivors) == diverged.step
    with pytest.raises(Diverged) as sim_run:
        train_simulated(problem, code, steps=diverged.step, lr=1e308, replay=diverged.survivors)
    assert sim_run.value.step == diverged.step
