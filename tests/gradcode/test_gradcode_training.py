"""Training: exact schemes follow full-gradient descent step for step, pipelined schemes decode
the full gradient when it does not change, the approximate decoders are what they claim, and
the trainer's clock is the simulator's."""
import numpy as np
import pytest

from pipeplan.deploy.gradcode.data import digits
from pipeplan.deploy.gradcode.models import MLP, SoftmaxRegression, make_model, mean_loss
from pipeplan.deploy.gradcode.protocol import Master, WorkerState
from pipeplan.deploy.gradcode.training import train_simulated
from pipeplan.formulations.gradcode.problem import homogeneous_problem
from pipeplan.formulations.gradcode.simulator import simulate_step_times
from pipeplan.solvers.gradcode.schemes import TRAINING, build

N, S = 6, 2


def _gd_losses(model: str, steps: int, lr: float) -> list[float]:
    data = digits()
    net = make_model(model, 64, 10)
    w = net.init(0)
    out = [mean_loss(net, w, data.X, data.y)]
    for _ in range(steps):
        w = w - lr * net.loss_and_grad_sum(w, data.X, data.y)[1] / len(data.y)
        out.append(mean_loss(net, w, data.X, data.y))
    return out


@pytest.mark.parametrize("model", ["softmax", "mlp"])
def test_model_gradients_match_finite_differences(model):
    data = digits()
    net = make_model(model, 64, 10)
    w = net.init(1) + 0.01 * np.random.default_rng(0).standard_normal(net.size)
    X, y = data.X[:30], data.y[:30]
    _, g = net.loss_and_grad_sum(w, X, y)
    for idx in np.random.default_rng(2).choice(net.size, 8, replace=False):
        e = np.zeros(net.size)
        e[idx] = 1e-6
        num = (net.loss_and_grad_sum(w + e, X, y)[0] - net.loss_and_grad_sum(w - e, X, y)[0]) / 2e-6
        assert g[idx] == pytest.approx(num, rel=1e-4, abs=1e-7)


@pytest.mark.parametrize("scheme", ["uncoded", "gc-fr", "gc-cr"])
def test_exact_schemes_follow_full_gradient_descent(scheme):
    problem = homogeneous_problem(N, S)
    run = train_simulated(problem, build(scheme, N, S), model="softmax", steps=15, lr=2.0)
    assert np.allclose(run.loss, _gd_losses("softmax", 15, 2.0), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("scheme", ["pgc-fr", "pgc-cr"])
def test_pipelined_exact_decoders_recover_a_constant_gradient(scheme):
    """With frozen weights every stored gradient is current, so an exact code must return the
    full gradient from any survivors, whatever the round-robin position."""
    data = digits()
    code = build(scheme, N, S)
    net = SoftmaxRegression(64, 10)
    w = np.random.default_rng(0).standard_normal(net.size) * 0.1
    parts = data.partitions(code.k)
    full = net.loss_and_grad_sum(w, data.X, data.y)[1] / len(data.y)
    workers = [WorkerState(i, code) for i in range(N)]
    master = Master(code, lr=1.0)
    rng = np.random.default_rng(1)
    for t in range(7):
        replies = {i: wk.reply(t, lambda j: net.loss_and_grad_sum(w, *parts[j])[1] / len(data.y))
                   for i, wk in enumerate(workers)}
        order = list(rng.permutation(N))
        survivors = order[:master.needed(order)]
        assert np.allclose(master.decode(survivors, replies), full, atol=1e-10)


def test_pipelined_workers_compute_one_partition_per_step():
    code = build("pgc-cr", N, S, decoder="linear")
    wk = WorkerState(2, code)
    seen = []
    wk.reply(0, lambda j: seen.append(j) or np.zeros(3))
    assert sorted(seen) == [2, 3, 4]                  # the first step fills the store
    for t in range(1, 7):
        seen.clear()
        wk.reply(t, lambda j: seen.append(j) or np.zeros(3))
        assert seen == [2 + t % 3]


def test_approximate_decoders_are_scaled_sums():
    rng = np.random.default_rng(0)
    g = rng.standard_normal((N, 4))
    sgd = build("ignore-sgd", N, S)
    master = Master(sgd, lr=1.0)
    survivors = [5, 0, 3, 1]
    assert np.allclose(master.decode(survivors, {i: g[i] for i in range(N)}), N / (N - S) * g[survivors].sum(axis=0))
    gc = build("ignore-gc", N, S)
    replies = {i: gc.B[i] @ g for i in range(N)}
    expected = N / ((N - S) * (S + 1)) * sum(replies[i] for i in survivors)
    assert np.allclose(Master(gc, lr=1.0).decode(survivors, replies), expected)


@pytest.mark.parametrize("scheme", TRAINING)
def test_every_training_scheme_learns(scheme):
    problem = homogeneous_problem(12, 2)
    code = build(scheme, 12, 2, decoder="linear" if scheme == "pgc-cr" else None)
    run = train_simulated(problem, code, model="softmax", steps=40)
    assert run.loss[-1] < 0.25 * run.loss[0]
    assert run.test_accuracy > 0.85
    assert len(run.survivors) == 40 and all(np.diff(run.time_s) > 0)


def test_mlp_learns_with_pgc_fr():
    run = train_simulated(homogeneous_problem(12, 1), build("pgc-fr", 12, 1), model="mlp", steps=60)
    assert run.loss[-1] < 0.2 * run.loss[0]
    assert isinstance(make_model("mlp", 64, 10), MLP)


@pytest.mark.parametrize("scheme", ["gc-fr", "gc-cr", "uncoded", "ignore-sgd"])
def test_training_clock_is_the_simulators(scheme):
    problem = homogeneous_problem(12, 2)
    code = build(scheme, 12, 2)
    run = train_simulated(problem, code, steps=30, seed=4)
    assert np.allclose(np.diff(run.time_s), simulate_step_times(problem, code, 30, seed=4))


def test_time_and_steps_to_target():
    run = train_simulated(homogeneous_problem(12, 1), build("pgc-fr", 12, 1), steps=30)
    target = run.loss[10]
    assert run.steps_to_loss(target) <= 10
    assert run.time_to_loss(target) == run.time_s[run.steps_to_loss(target)]
    assert run.time_to_loss(-1.0) is None
