"""Gradient codes: every construction decodes every straggler set (exhaustive verifier, n <= 12,
s <= 3), the checker's rules, the schedules' staleness, and the verifier against single decodes."""
import itertools
from dataclasses import replace

import numpy as np
import pytest

from pipeplan.core.errors import InputError
from pipeplan.formulations.gradcode.checker import max_staleness, violations
from pipeplan.formulations.gradcode.decoders import decoding_vector, needed_replies
from pipeplan.formulations.gradcode.gradient_code import code_from_dict
from pipeplan.formulations.gradcode.verifier import straggler_sets, verify
from pipeplan.solvers.gradcode.cyclic import cyclic_repetition
from pipeplan.solvers.gradcode.fractional import fractional_repetition
from pipeplan.solvers.gradcode.pipelining import pgc_cr, pgc_fr
from pipeplan.solvers.gradcode.schemes import build

CASES = [(n, s) for n in range(2, 13) for s in range(1, 4) if s < n]
FR_CASES = [(n, s) for n, s in CASES if n % (s + 1) == 0]


@pytest.mark.parametrize("n,s", CASES)
def test_cr_and_pgc_cr_decode_every_straggler_set(n, s):
    for code in (cyclic_repetition(n, s), pgc_cr(n, s)):
        v = verify(code)
        assert v.exhaustive and v.sets_checked == len(list(itertools.combinations(range(n), s)))
        assert v.decodable, (code.scheme, v)
        assert v.worst_residual <= 1e-6 and np.isfinite(v.worst_condition)
        assert violations(code) == []


@pytest.mark.parametrize("n,s", FR_CASES)
def test_fr_and_pgc_fr_decode_every_straggler_set(n, s):
    for code in (fractional_repetition(n, s), pgc_fr(n, s)):
        v = verify(code)
        assert v.decodable and v.exhaustive and v.worst_residual == 0.0 and v.worst_condition == 1.0
        assert violations(code) == []


@pytest.mark.parametrize("maker", [pgc_fr, pgc_cr, lambda n, s: pgc_cr(n, s, decoder="linear")])
@pytest.mark.parametrize("n,s", [(12, 1), (12, 2), (12, 3), (6, 2)])
def test_pipelined_schedules_compute_each_partition_once_per_step(maker, n, s):
    code = maker(n, s)
    assert code.schedule.shape == (s + 1, n)
    for row in code.schedule:
        assert sorted(row) == list(range(n))          # a permutation: every partition once
        assert all(code.support[i, j] for i, j in enumerate(row))
    assert max_staleness(code) == s


def test_published_pgc_cr_decoder_is_approximate_and_flagged():
    code = pgc_cr(12, 2, decoder="linear")
    assert code.linear_weight == pytest.approx(12 / (10 * 3))
    v = verify(code)
    assert not v.decodable and 0 < v.worst_residual < 1
    assert violations(code) == []


def test_decoding_vectors_decode_every_straggler_set_and_ignore_the_stragglers():
    """The decoding vector of every one of the 36 straggler sets (the verifier against single-set
    least squares: test_gradcode_properties.py)."""
    code = cyclic_repetition(9, 2, seed=3)
    for stragglers in itertools.combinations(range(9), 2):
        stragglers = list(stragglers)
        survivors = [w for w in range(9) if w not in stragglers]
        a = decoding_vector(code, survivors)
        assert np.abs(a @ code.B - 1).max() < 1e-9
        assert np.all(a[stragglers] == 0)


def test_verifier_finds_a_set_that_does_not_decode():
    fr = fractional_repetition(6, 1)
    over_claimed = replace(fr, s=2)                   # FR with groups of 2 cannot lose 2 of a group
    v = verify(over_claimed)
    assert not v.decodable and v.worst_residual == pytest.approx(1.0)
    assert set(v.worst_set) in ({0, 1}, {2, 3}, {4, 5})
    cr = cyclic_repetition(8, 1)
    v = verify(replace(cr, s=2, wait=6))
    assert not v.decodable


def test_verifier_samples_above_n24():
    sets, exhaustive = straggler_sets(30, 3, samples=500, seed=1)
    assert not exhaustive and 450 <= len(sets) <= 500 and sets.shape[1] == 3
    sets, exhaustive = straggler_sets(24, 3)
    assert exhaustive and len(sets) == 2024
    code = build("fr", 30, 2)
    v = verify(code, samples=300)
    assert v.decodable and not v.exhaustive


def test_checker_lists_every_broken_rule():
    code = fractional_repetition(6, 1)
    support = code.support.copy()
    support[1, 0] = False                             # partition 0 now on one worker, group rows differ
    B = code.B.copy()
    B[2, 0] = 5.0                                     # B outside the support
    bad = replace(code, support=support, B=B)
    out = violations(bad)
    assert any("partition 0 is stored on 1 worker" in v for v in out)
    assert any("B[2][0]" in v for v in out)
    assert any("store different partitions" in v for v in out)


def test_checker_rejects_stale_schedules_and_capacity():
    from pipeplan.formulations.gradcode.problem import homogeneous_problem
    code = pgc_cr(6, 1)
    frozen = code.schedule.copy()
    frozen[:, 0] = frozen[0, 0]                       # worker 0 never refreshes its other partition
    assert any("never recomputes" in v for v in violations(replace(code, schedule=frozen)))
    tight = homogeneous_problem(6, 1, capacity=1)
    assert any("capacity 1" in v for v in violations(code, tight))


def test_needed_replies_groups_and_count_rules():
    fr = fractional_repetition(6, 2)                  # groups {0,1,2}, {3,4,5}
    assert needed_replies(fr, [0, 1, 4, 2, 3, 5]) == 3
    assert needed_replies(fr, [3, 0]) == 2
    assert needed_replies(cyclic_repetition(6, 2), [0, 1, 2, 3, 4, 5]) == 4


def test_code_json_round_trip_and_bad_placements():
    code = pgc_cr(7, 2)
    again = code_from_dict(code.to_dict())
    assert again.same_as(code)
    for grouped in (fractional_repetition(6, 2), pgc_fr(6, 2)):   # read back with wait n - s, never read
        assert grouped.decoder == "groups" and code_from_dict(grouped.to_dict()).same_as(grouped)
    assert not code.same_as(replace(code, wait=code.wait - 1))
    doc = code.to_dict()
    doc["B"][0] = doc["B"][0][:-1]
    with pytest.raises(InputError, match="entries"):
        code_from_dict(doc)
    with pytest.raises(InputError, match="s = 7"):
        code_from_dict({**code.to_dict(), "s": 7})
    # a bare placement gets B = its ones: cyclic ones decode with n = 4 but not with n = 3
    four = code_from_dict({"support": [[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1], [1, 0, 0, 1]], "s": 1})
    assert four.decoder == "lstsq" and violations(four) == [] and verify(four).decodable
    three = code_from_dict({"support": [[1, 1, 0], [0, 1, 1], [1, 0, 1]], "s": 1})
    v = verify(three)
    assert not v.decodable and v.worst_residual == pytest.approx(1 / 3)


def test_bad_construction_inputs():
    with pytest.raises(InputError, match=r"\(s\+1\) \| n"):
        fractional_repetition(10, 2)
    with pytest.raises(InputError, match="s = 4"):
        build("cr", 4, 4)
    with pytest.raises(InputError, match="unknown scheme"):
        build("rs", 6, 1)
