"""The codes from the literature: cyclic-MDS (Raviv et al. 2018) and the sparse-graph
approximate code (Charles et al. 2017), checked against brute force one straggler set at a time."""
import itertools
from dataclasses import replace

import numpy as np
import pytest

import pipeplan
from pipeplan.core.errors import InputError
from pipeplan.formulations.gradcode.checker import violations
from pipeplan.formulations.gradcode.mds import cyclic_mds_matrix, generator, generator_roots
from pipeplan.formulations.gradcode.placement import cyclic_support
from pipeplan.formulations.gradcode.problem import homogeneous_problem
from pipeplan.formulations.gradcode.verifier import verify
from pipeplan.solvers.gradcode.approximate import sparse_graph_code
from pipeplan.solvers.gradcode.cyclic import cyclic_matrix
from pipeplan.solvers.gradcode.cyclic_mds import cyclic_mds
from pipeplan.solvers.gradcode.schemes import build


def _survivors(n, stragglers):
    return [w for w in range(n) if w not in stragglers]


def _decodes_by_rank(BF):
    return np.linalg.matrix_rank(np.vstack([BF, np.ones(BF.shape[1])])) == np.linalg.matrix_rank(BF)


@pytest.mark.parametrize("n", [5, 6, 7, 8, 9, 10])
def test_cyclic_mds_decodes_every_straggler_set_by_brute_force(n):
    """Every s < n that the construction accepts (both parities of n - s), by a rank test per
    set, and the verifier's exhaustive verdict agrees."""
    built = 0
    for s in range(n):
        try:
            code = cyclic_mds(n, s)
        except InputError:            # a partition scale too close to 0 (large s on tiny n)
            continue
        built += 1
        assert np.array_equal(code.support, cyclic_support(n, s)) and violations(code) == []
        for F in itertools.combinations(range(n), s):
            assert _decodes_by_rank(code.B[_survivors(n, F)]), (n, s, F)
        v = verify(code)
        assert v.decodable and v.method == "exhaustive" and v.verdict.startswith("decodable")
    assert built >= n - 2


def test_generator_is_real_with_the_stated_roots_and_divides_x_n_minus_sign():
    for n, s in ((12, 3), (12, 4), (13, 3), (13, 4)):
        g, z = generator(n, s), generator_roots(n, s)
        assert g[-1] == 1 and np.abs(np.polyval(g[::-1], z)).max() < 1e-12
        sign = 1 if (n - s) % 2 else -1                 # cyclic for n - s odd, else negacyclic
        assert np.abs(z ** n - sign).max() < 1e-12 and np.abs(z - 1).min() > 0.1


def _worst_condition(B, n, s, sets):
    worst = 0.0
    for F in sets:
        sv = np.linalg.svd(B[_survivors(n, F)], compute_uv=False)
        worst = max(worst, sv[0] / sv[n - s - 1])
    return worst


@pytest.mark.parametrize("n,s", [(12, 2), (12, 3), (24, 3), (24, 4)])
def test_cyclic_mds_is_far_better_conditioned_than_random_cr(n, s):
    """On the same straggler sets, ten times better than the best of three random CR seeds."""
    sets = list(itertools.combinations(range(n), s))[::1 if n < 20 else 7]
    mds = _worst_condition(cyclic_mds_matrix(n, s), n, s, sets)
    cr = min(_worst_condition(cyclic_matrix(n, s, np.random.default_rng(seed)), n, s, sets) for seed in range(3))
    assert mds * 10 < cr, (mds, cr)


def test_structural_verdict_for_cyclic_mds_at_scale_and_only_for_the_exact_matrix():
    code = cyclic_mds(200, 3)
    v = verify(code)
    assert v.decodable and v.method == "structure" and "cyclic-MDS" in v.proof and v.proven
    assert v.worst_residual < 1e-9 and v.sets_checked >= 1
    small = build("cyclic-mds", 30, 3)
    scale = np.ones((30, 1))
    scale[5] = 2.0                       # worker 5 doubles its reply: decodable still, not the construction
    w = verify(replace(small, B=small.B * scale), samples=200)
    assert w.decodable and w.method == "sampled"
    assert w.method == "sampled" and w.verdict.startswith("sampled") and not w.proven


def _brute_errors(code):
    """||a^T B_F - 1||^2 / k per straggler set, a from numpy's lstsq (optimal) or the fixed weight."""
    out = []
    for F in itertools.combinations(range(code.n), code.s):
        alive = _survivors(code.n, F)
        if code.decoder == "lstsq":
            a, *_ = np.linalg.lstsq(code.B[alive].T, np.ones(code.k), rcond=None)
        else:
            a = np.full(len(alive), code.linear_weight)
        out.append(((a @ code.B[alive] - 1) ** 2).sum() / code.k)
    return np.array(out)


@pytest.mark.parametrize("decoder", ["lstsq", "linear"])
def test_approximate_code_error_matches_brute_force_and_is_never_called_decodable(decoder):
    code = sparse_graph_code(14, 3, degree=3, seed=2, decoder=decoder)
    assert (code.support.sum(axis=0) == 3).all() and (code.support.sum(axis=1) == 3).all()
    errors = _brute_errors(code)
    v = verify(code)
    assert v.method == "exhaustive" and v.approximate and not v.decodable
    assert v.worst_error == pytest.approx(errors.max(), rel=1e-9, abs=1e-12)
    assert v.mean_error == pytest.approx(errors.mean(), rel=1e-9, abs=1e-12)
    assert v.verdict.startswith("approximate") and "decodable" not in v.verdict
    assert errors.max() > 0


def test_optimal_decoder_is_never_worse_than_the_fixed_one():
    """pipeplan's least-squares decoder against the published fixed weights on the same code,
    as the verifier reports them (each matches the brute force: the test above)."""
    opt = verify(sparse_graph_code(12, 2, degree=3, seed=1))
    fixed = verify(sparse_graph_code(12, 2, degree=3, seed=1, decoder="linear"))
    assert opt.exhaustive and fixed.exhaustive
    assert opt.worst_error <= fixed.worst_error + 1e-12 and opt.mean_error < fixed.mean_error


def test_new_schemes_build_and_solve_through_the_registry():
    problem = homogeneous_problem(12, 2)
    r = pipeplan.solve(problem, "cyclic-mds")
    assert r.plan["verification"]["decodable"] and r.plan["verification"]["method"] == "exhaustive"
    a = pipeplan.solve(problem, "approx", decoder="linear")   # degree s+1: the checker wants s+1 copies
    assert a.quality.value == "feasible" and a.plan["decoder"] == "linear" and "approximate" in a.message
    assert a.plan["meta"]["approximate"] and a.plan["verification"]["verdict"].startswith("approximate")
    opt = pipeplan.solve(problem, "approx")        # the optimal decoder, the default: still feasible, error named
    assert opt.quality.value == "feasible" and opt.plan["decoder"] == "lstsq" and "approximate" in opt.message
    for degree in (13, 10_000):     # past the 12 workers: refused before the solver runs, naming the field
        with pytest.raises(InputError, match="must be in 1..n = 12") as err:
            pipeplan.solve(problem, "approx", degree=degree)
        assert err.value.field == "degree"
    assert opt.plan["verification"]["mean_error"] < a.plan["verification"]["mean_error"]
    assert build("approx", 12, 2, decoder="linear").decoder == "linear"
    with pytest.raises(InputError, match="only pgc-cr and approx take a decoder choice, not cyclic-mds"):
        build("cyclic-mds", 12, 2, decoder="linear")
