"""Structural decodability verdicts: what the code's structure proves, for every one of the
C(n, s) straggler sets at once, without enumerating them (the verifier confirms by numeric
decodes).

* Groups codes (FR, the assignment solvers' codes), groups decoder: the master adds the reply
  of the first survivor of each group. When the groups are disjoint and the workers of a group
  have identical rows of B, a group of >= s+1 workers always keeps a survivor, so with every
  group that encodes anything that large the decoded vector is always sum_g R_g (R_g the
  group's row): decodable iff that sum is the all-ones vector. Groups of <= s workers can be
  wiped out: every set W of them that s stragglers can wipe out (and nothing else) is tried,
  the decode then being the sum over the other groups; one that is off gives a failing set,
  built explicitly (W's workers, the rest one short of any other group). More than
  ``MAX_WIPEOUTS`` such sets: no verdict.
* Cyclic-MDS (Raviv et al., ICML 2018; ``mds``): least squares, k = n, and B equal to the
  construction's matrix for (n, s): decodable by the MDS theorem.

Anything else has no structural verdict (None): the verifier enumerates or samples.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from pipeplan.formulations.gradcode.gradient_code import GradientCode
from pipeplan.formulations.gradcode.mds import cyclic_mds_matrix

TOL = 1e-9          # entries of B compared to a construction's / sums compared to 1
MAX_WIPEOUTS = 4096  # sets of small groups tried before giving up (no verdict)


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
    live = [g for g in range(len(members)) if np.abs(R[g]).max() > TOL]    # groups that encode something
    small = [g for g in live if len(members[g]) <= s]
    in_live = {w for g in live for w in members[g]}
    free = [w for w in range(n) if w not in in_live]
    # a straggler set wipes out some groups W (all of them small) and leaves a survivor in the
    # others; the decode is then the sum of R_g over g not in W. Every W that s stragglers can
    # make is tried: its groups' workers plus s - |W| more that wipe out nothing else.
    tried = 0
    for size in range(len(small) + 1):
        if size and size * min(len(members[g]) for g in small) > s:
            break                                # no s stragglers wipe out this many groups
        for W in itertools.combinations(small, size):
            tried += 1
            if tried > MAX_WIPEOUTS:
                return None
            chosen = [w for g in W for w in members[g]]
            spare = free + [w for g in live if g not in W for w in members[g][1:]]   # one member survives
            if len(chosen) > s or len(chosen) + len(spare) < s:
                continue
            decoded = R[[g for g in live if g not in W]].sum(axis=0)
            off = np.abs(decoded - 1.0)
            if off.max() > TOL:
                j = int(np.argmax(off))
                lost = f"groups {list(W)} (<= s workers each) all straggling: " if W else ""
                return Certificate(False, f"{lost}the surviving groups' rows sum to {decoded[j]:.6g} for "
                                          f"partition {j}, not 1",
                                   (tuple(sorted(chosen + spare[:s - len(chosen)])),))
    sizes = sorted(len(members[g]) for g in live)
    told = (f"each has >= s+1 = {s + 1} workers (smallest {sizes[0] if sizes else 0})" if not small else
            f"each wipe-out of its {len(small)} groups of <= s workers that s stragglers can make")
    return Certificate(True, f"groups: {len(live)} disjoint encoding groups with identical rows; "
                             f"{told} leaves rows summing to 1")


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
