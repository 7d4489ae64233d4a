"""One local Ray cluster at a time: the test command runs pytest-xdist workers side by side
(README), and two ``ray.cluster_utils.Cluster`` heads at once would compete for ports and for
the CPUs their timing tests count on. A file lock in the temporary folder serialises them."""
import contextlib
import fcntl
import os
import tempfile


@contextlib.contextmanager
def one_ray_cluster_at_a_time():
    with open(os.path.join(tempfile.gettempdir(), "pipeplan-tests-ray-cluster.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
