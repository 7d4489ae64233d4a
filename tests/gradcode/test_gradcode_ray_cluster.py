"""The Ray backend on a local multi-node cluster (``ray.cluster_utils.Cluster``: a head and two
worker raylets on this machine), 16 worker actors spread over the nodes, blocking stragglers.

Delays come from a trace, far apart (1.7 s or more between any two events whose order matters,
at ``time_scale`` 1), so that which replies the master uses, which come late and which are still
out at the end follow exactly from the queue model worked out by hand below."""
import os

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (extra pipeplan[ray])")

from ray.cluster_utils import Cluster  # noqa: E402

from pipeplan.deploy.gradcode.ray_backend import train_ray  # noqa: E402
from pipeplan.deploy.gradcode.training import train_simulated  # noqa: E402
from pipeplan.formulations.gradcode.decoders import needed_replies  # noqa: E402
from pipeplan.formulations.gradcode.problem import homogeneous_problem  # noqa: E402
from pipeplan.formulations.gradcode.straggler import StragglerModel  # noqa: E402
from pipeplan.solvers.gradcode.schemes import build  # noqa: E402
from tests.ray_lock import one_ray_cluster_at_a_time  # noqa: E402

N = 16
NODES = 3


@pytest.fixture(scope="module")
def cluster():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    with one_ray_cluster_at_a_time():
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        for _ in range(NODES - 1):
            c.add_node(num_cpus=1)
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False, logging_level="ERROR")
        try:
            yield c
        finally:
            ray.shutdown()
            c.shutdown()


def trace(events: dict[tuple[int, int], float], steps: int) -> StragglerModel:
    rows = [[0.0] * N for _ in range(steps)]
    for (t, i), delay in events.items():
        rows[t][i] = delay
    return StragglerModel(kind="trace", trace=tuple(tuple(r) for r in rows))


def test_blocking_stragglers_on_a_multi_node_cluster(cluster):
    # PGC-CR, n = 16, s = 2: the master waits for the first 14 replies (count rule). A worker
    # computes one partition per step (0.3 s) after the first step (all 3 of its partitions, 0.9 s).
    # Delays: step 0 worker 3 +5 s and worker 7 +2 s, step 2 worker 12 +4.5 s. A blocking
    # worker's reply of step t comes at max(step start, its previous reply) + its reply time:
    #   step 0 [0, 0.9]:   14 at 0.9; 7 at 2.9, 3 at 5.9            -> without 3, 7; ends 0.9
    #   step 1 [0.9, 1.2]: 14 at 1.2; 7 busy to 2.9 -> 3.2, 3 -> 6.2 -> without 3, 7 (no delay of
    #                      their own this step: the blocking carry-over); ends 1.2
    #   step 2 [1.2, 3.5]: 13 at 1.5; 12 at 6.0, 3 at 6.5, 7 at 3.5 (after its replies of steps
    #                      0 and 1 at 2.9 and 3.2, which the master drops now) -> 3 busy ones for
    #                      s = 2: the master waits for the first of them, 7; ends 3.5
    #   step 3 [3.5, 3.8]: 14 at 3.8 (7 too); 12 at 6.3, 3 at 6.8      -> without 3, 12; ends 3.8
    # Still out at the end (the next reply is due at 5.9): 3's replies of every step, 12's of
    # steps 2 and 3. Every order that matters is 1.7 s or more apart (a worker's own replies come
    # in order anyway).
    steps = 4
    problem = homogeneous_problem(N, 2, partition_time_s=0.3,
                                  straggler=trace({(0, 3): 5.0, (0, 7): 2.0, (2, 12): 4.5}, steps))
    code = build("pgc-cr", N, 2)
    run = train_ray(problem, code, steps=steps, time_scale=1.0)

    alive = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
    assert len(alive) == NODES and set(run.nodes) == alive, run.nodes   # actors on every node

    seen = f"survivors {run.survivors}, late {run.late}, still out {run.still_out}, arrivals {run.arrivals}"
    everyone = set(range(N))
    assert [set(x) for x in run.survivors] == [everyone - {3, 7}, everyone - {3, 7},
                                              everyone - {3, 12}, everyone - {3, 12}], seen
    assert run.survivors[2][-1] == 7                               # the master waited for 7
    assert run.late == [[7], [7], [], []], seen
    assert [sorted(x) for x in run.still_out] == [[3], [3], [3, 12], [3, 12]]
    assert run.dropped_replies == 2 + 6
    assert np.allclose(run.time_s, [0.0, 0.9, 1.2, 3.5, 3.8])
    for t in range(steps):
        # the used replies are the first the master took, up to what it needs; used + late +
        # still out = every reply sent, each once
        taken = run.arrivals[t]
        assert run.survivors[t] == taken[:needed_replies(code, taken)] == taken[:14]
        assert sorted(taken + run.still_out[t]) == list(range(N))
        assert taken[14:] == run.late[t]
    # the updates are the simulated backend's, bit for bit: each call carries its step's weights
    # and a blocking actor runs its calls in order, so even the late workers' stored (stale)
    # gradients are the simulator's
    again = train_simulated(problem, code, steps=steps, replay=run.survivors)
    assert np.allclose(again.loss, run.loss, rtol=1e-12, atol=0)
    assert run.loss[-1] < run.loss[0]
