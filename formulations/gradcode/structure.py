"""Structural decodability verdicts: what the code's structure proves, for every one of the
C(n, s) straggler sets at once, without enumerating them (the verifier confirms by numeric
decodes).

* Groups codes (FR, the assignment solvers' codes), groups decoder: the master adds the reply
  of the first survivor of each group. When the groups are disjoint and the workers of a group
  have identical rows of B, a group of >= s+1 workers always keeps a survivor, so with every
  group that encodes anything that large the decoded vector is always sum_g R_g (R_g the
  group's row): decodable iff that sum is the all-ones vector. Otherwise a failing set is
  built: all of a group of <= s workers straggling (the rest from workers of no such group),
  or, when the sum itself is off, a set that leaves every group a survivor.
* Cyclic-MDS (Raviv et al., ICML 2018; ``mds``): least squares, k = n, and B equal to the
  construction's matrix for (n, s): decodable by the MDS theorem.

Anything else has no structural verdict (None): the verifier enumerates or samples.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeplan.formulations.gradcode.gradient_code import GradientCode
from pipeplan.formulations.gradcode.mds import cyclic_mds_matrix

TOL = 1e-9          # entries of B compared to a construction's / sums compared to 1


@dataclass(frozen=True)
class Certificate:
    decodable: bool
    proof: str                                  # the argument, or why the candidate sets fail
    candidates: tuple[tuple[int, ...], ...] = ()  # straggler sets that fail (to confirm numerically)


def certificate(code: GradientCode) -> Certificate | None:
    if code.decoder == "groups":
        return _groups(code)
    if code.decoder == "lstsq":
        return _cyclic_mds(code)
    return None


def _fill(n: int, s: int, chosen: list[int], avoid: set[int]) -> tuple[int, ...] | None:
    """``chosen`` plus the lowest-numbered workers outside ``avoid`` up to s in all (None if
    there are not enough)."""
    rest = [w for w in range(n) if w not in avoid and w not in chosen][:s - len(chosen)]
    return tuple(sorted(chosen + rest)) if len(chosen) + len(rest) == s else None


def _groups(code: GradientCode) -> Certificate | None:
    n, s = code.n, code.s
    members = [sorted(g) for g in code.groups]
    flat = [w for g in members for w in g]
    if len(set(flat)) != len(flat):
        return None                              # overlapping groups: no argument here
    rows = []
    for g in members:
        block = code.B[g]
        if not np.allclose(block, block[0], rtol=0, atol=TOL):
            return None                          # which member decodes would matter
        rows.append(block[0])
    R = np.array(rows)
    total = R.sum(axis=0)
    exact_sum = bool(np.abs(total - 1.0).max() <= TOL)
    small = [g for g, m in enumerate(members) if len(m) <= s and np.abs(R[g]).max() > TOL]
    if exact_sum and not small:
        sizes = [len(m) for g, m in enumerate(members) if np.abs(R[g]).max() > TOL]
        return Certificate(True, f"groups: the {len(sizes)} encoding groups are disjoint, each has >= s+1 = {s + 1} "
                                 f"workers (smallest {min(sizes)}) with identical rows, and their rows sum to 1")
    in_small = {w for g in small for w in members[g]}
    candidates = [_fill(n, s, list(members[g]), in_small) for g in small]
    candidates.append(_fill(n, s, [], in_small))          # every group keeps a survivor
    reasons = [f"group {g} has {len(members[g])} <= s worker(s), all straggling" for g in small]
    if not exact_sum:
        j = int(np.argmax(np.abs(total - 1.0)))
        reasons.append(f"the groups' rows sum to {total[j]:.6g} for partition {j}, not 1")
    return Certificate(False, "; ".join(reasons), tuple(c for c in candidates if c is not None))


def _cyclic_mds(code: GradientCode) -> Certificate | None:
    n, s = code.n, code.s
    if code.k != n:
        return None
    try:
        B = cyclic_mds_matrix(n, s)
    except ValueError:
        return None
    # g has no zero coefficient (an MDS code's weight-(s+1) codeword), so B's non-zeros are CR's support
    if not np.array_equal(code.support, B != 0) or not np.allclose(code.B, B, rtol=0, atol=TOL * max(1.0, float(np.abs(B).max()))):
        return None
    kind = "cyclic" if (n - s) % 2 or s == 0 else "negacyclic, partitions rescaled"
    return Certificate(True, f"cyclic-MDS: B is the construction's matrix for n={n}, s={s} ({kind}); "
                             "its code is MDS (BCH bound), so every n-s rows decode (Raviv et al. 2018)")
