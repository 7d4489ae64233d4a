"""Property tests of the decodability verifier against brute-force decoding of random placements.

The verifier decodes batches of straggler sets through one stacked SVD; the oracles here decode
one set at a time by other means: a rank test (the all-ones vector lies in the row space of the
survivors' rows of B) for the least-squares decoder, and covering (every group keeps a
survivor) for the groups decoder."""
import itertools

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeplan.formulations.gradcode.decoders import decoding_vector
from pipeplan.formulations.gradcode.gradient_code import code_from_dict
from pipeplan.formulations.gradcode.placement import groups_code
from pipeplan.formulations.gradcode.stopping import kth_smallest
from pipeplan.formulations.gradcode.verifier import (
    QR_CONDITION,
    RESIDUAL_TOL,
    _lstsq_batch,
    _lstsq_each,
    sampled_sets,
    straggler_sets,
    verify,
)

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def lstsq_codes(draw):
    """A random placement with small integer coefficients on its support (so decodability is
    an exact algebraic fact, far from the verifier's tolerance either way)."""
    n = draw(st.integers(2, 7))
    k = draw(st.integers(1, 7))
    s = draw(st.integers(0, n - 1))
    support = np.array(draw(st.lists(st.lists(st.integers(0, 1), min_size=k, max_size=k), min_size=n, max_size=n)))
    coeff = np.array(draw(st.lists(st.lists(st.sampled_from([-2, -1, 1, 2]), min_size=k, max_size=k),
                                   min_size=n, max_size=n)))
    B = (support * coeff).astype(float)
    return code_from_dict({"support": support.tolist(), "B": B.tolist(), "s": s, "decoder": "lstsq"}, "random")


def _decodes_by_rank(B_F: np.ndarray) -> bool:
    ones = np.ones((1, B_F.shape[1]))
    return np.linalg.matrix_rank(np.vstack([B_F, ones])) == np.linalg.matrix_rank(B_F) if len(B_F) else False


@SETTINGS
@given(lstsq_codes())
def test_lstsq_verifier_agrees_with_rank_test_on_every_straggler_set(code):
    sets = list(itertools.combinations(range(code.n), code.s))
    undecodable = [F for F in sets if not _decodes_by_rank(code.B[[w for w in range(code.n) if w not in F]])]
    v = verify(code)
    assert v.exhaustive and v.sets_checked == len(sets)
    assert v.decodable == (not undecodable)
    if undecodable:
        assert v.worst_set in undecodable and v.worst_residual > RESIDUAL_TOL
    # the batched residual equals the one-set-at-a-time least-squares residual
    worst = max(np.abs(decoding_vector(code, [w for w in range(code.n) if w not in F]) @ code.B - 1).max()
                for F in sets)
    assert np.isclose(v.worst_residual, worst, atol=1e-7)


@st.composite
def group_codes(draw):
    """Workers split into random groups, each group storing a random number of partitions."""
    n = draw(st.integers(2, 9))
    labels = draw(st.lists(st.integers(0, n - 1), min_size=n, max_size=n))
    groups = [[w for w in range(n) if labels[w] == g] for g in sorted(set(labels))]
    counts = draw(st.lists(st.integers(1, 3), min_size=len(groups), max_size=len(groups)))
    s = draw(st.integers(0, n - 1))
    return groups_code("random-groups", s, n, groups, counts)


@SETTINGS
@given(group_codes())
def test_groups_verifier_agrees_with_covering_on_every_straggler_set(code):
    sets = list(itertools.combinations(range(code.n), code.s))
    lost = [F for F in sets if any(set(g) <= set(F) for g in code.groups)]   # a whole group straggles
    v = verify(code)
    assert v.decodable == (not lost) == (min(len(g) for g in code.groups) > code.s)
    if lost:
        assert v.worst_set in lost and v.worst_residual == 1.0
    for F in sets[:50]:
        survivors = [w for w in range(code.n) if w not in F]
        exact = np.abs(decoding_vector(code, survivors) @ code.B - 1).max() <= RESIDUAL_TOL
        assert exact == (F not in lost)


@SETTINGS
@given(st.integers(1, 12), st.integers(1, 6), st.data())
def test_kth_smallest_equals_a_partition_ties_and_inf_included(n, rows, data):
    values = st.sampled_from([0.0, 0.5, 1.0, 2.0, np.inf])           # few values: many ties
    T = np.array(data.draw(st.lists(st.lists(values, min_size=n, max_size=n), min_size=rows, max_size=rows)))
    k = data.draw(st.integers(1, n))
    want = np.partition(T, k - 1, axis=1)[:, k - 1]
    assert np.array_equal(kth_smallest(T, k), want)
    assert np.array_equal(kth_smallest(T.copy(), k, overwrite=True), want)
    assert np.array_equal(kth_smallest(np.tile(T, (1, 3)), 3 * k), np.partition(np.tile(T, (1, 3)), 3 * k - 1, axis=1)[:, 3 * k - 1])


def test_large_matrices_decode_one_by_one_as_the_batch_decodes_them():
    """``_lstsq_batch`` sends matrices past ONE_THREAD_CELLS to ``lstsq`` one at a time; on small
    ones both paths must give the same decodes and conditions: a well-conditioned B_F (the
    batch's QR path), a rank-deficient one and an ill-conditioned one (its lstsq path)."""
    rng = np.random.default_rng(5)
    good = rng.standard_normal((6, 8))
    low = good.copy()
    low[5] = low[0] + low[1]                                          # rank 5
    ill = good.copy()
    ill[5] = ill[0] + 1e-10 * ill[5]                                  # condition past QR_CONDITION
    B = np.vstack([good, low, ill])
    code = code_from_dict({"support": (B != 0).astype(int).tolist(), "B": B.tolist(), "s": 0,
                           "decoder": "lstsq"}, "stacked")
    surv = np.arange(18).reshape(3, 6)
    decoded, condition = _lstsq_batch(code, surv)
    each, each_condition = _lstsq_each(code.B[surv])
    assert np.allclose(each, decoded, atol=1e-8)
    assert np.allclose(each_condition, condition, rtol=1e-6)
    assert condition[2] > QR_CONDITION > condition[0]


def test_sampled_straggler_sets_have_no_repeats_across_draw_chunks():
    n = 3000                                        # CELLS // n rows per chunk: two chunks of draws
    chunks = list(sampled_sets(n, 1, samples=2000, seed=2))
    sets = np.concatenate(chunks)
    assert len(chunks) == 2 and len(np.unique(sets, axis=0)) == len(sets) < 2000
    assert np.array_equal(sets, straggler_sets(n, 1, samples=2000, seed=2, enumerate_all=False)[0])
