"""The Ray backend on a local one-node Ray (2 CPUs, 4 worker actors, a few steps) with
non-blocking stragglers (``straggle="sleep"``): a straggler is never busy, its next reply is on
time; late replies are dropped, the master waits only until it can decode, and its updates are
the simulated backend's (replaying the survivors Ray saw gives the same losses and times).
The blocking stragglers on a multi-node cluster: test_gradcode_ray_cluster.py."""
import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (extra pipeplan[ray]; CI installs it)")

from pipeplan.deploy.gradcode.ray_backend import train_ray  # noqa: E402
from pipeplan.deploy.gradcode.training import train_simulated  # noqa: E402
from pipeplan.formulations.gradcode.problem import homogeneous_problem  # noqa: E402
from pipeplan.formulations.gradcode.straggler import StragglerModel  # noqa: E402
from pipeplan.solvers.gradcode.schemes import build  # noqa: E402


def test_sleeping_stragglers_are_never_busy():
    # PGC-CR, n = 4, s = 1: the first 3 replies. Reply times 0.4 s in step 0 (both partitions),
    # then 0.2 s; worker t+1 is 1.5 s late in step t. Steps end at 0.4, 0.6, 0.8, and each
    # late reply (1.9, 2.1, 2.3) is still out at the end. Worker 1, late in step 0, replies on
    # time in step 1: sleeping out its delay does not keep it from the next step's work.
    rows = ((0.0, 1.5, 0.0, 0.0), (0.0, 0.0, 1.5, 0.0), (0.0, 0.0, 0.0, 1.5))
    problem = homogeneous_problem(4, 1, partition_time_s=0.2, straggler=StragglerModel(kind="trace", trace=rows))
    code = build("pgc-cr", 4, 1)
    steps = 3
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        run = train_ray(problem, code, steps=steps, time_scale=1.0, straggle="sleep")
    finally:
        ray.shutdown()
    assert run.backend == "ray" and run.straggle == "sleep" and len(run.loss) == steps + 1
    assert [sorted(x) for x in run.survivors] == [[0, 2, 3], [0, 1, 3], [0, 1, 2]]
    assert run.late == [[], [], []] and run.still_out == [[1], [2], [3]] and run.dropped_replies == 3
    assert run.arrivals == run.survivors
    assert np.allclose(run.time_s, [0.0, 0.4, 0.6, 0.8])
    again = train_simulated(problem, code, steps=steps, replay=run.survivors)
    assert np.allclose(again.loss, run.loss, rtol=1e-12, atol=0)
    assert np.allclose(again.time_s, run.time_s)
    assert run.loss[-1] < run.loss[0]


def test_unknown_straggle_mode_is_refused():
    with pytest.raises(ValueError, match="straggle"):
        train_ray(homogeneous_problem(4, 1), build("pgc-fr", 4, 1), straggle="busy")
