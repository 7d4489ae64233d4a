"""Named schemes for ``pipeplan gradcode`` and training: the constructions and the baselines."""
from __future__ import annotations

from pipeplan.core.deadline import Deadline
from pipeplan.core.errors import InputError
from pipeplan.formulations.gradcode.gradient_code import GradientCode, check_lstsq_size
from pipeplan.solvers.gradcode.approximate import sparse_graph_code
from pipeplan.solvers.gradcode.baselines import ignore_stragglers_gc, ignore_stragglers_sgd, uncoded
from pipeplan.solvers.gradcode.cyclic import cyclic_repetition
from pipeplan.solvers.gradcode.cyclic_mds import cyclic_mds
from pipeplan.solvers.gradcode.fractional import fractional_repetition
from pipeplan.solvers.gradcode.pipelining import pgc_cr, pgc_fr

PLACEMENTS = ("fr", "cr", "pgc-fr", "pgc-cr", "cyclic-mds", "approx")
# the schemes Su and Li compare in training (GC-FR/GC-CR are FR/CR without pipelining)
TRAINING = ("uncoded", "gc-fr", "gc-cr", "ignore-sgd", "ignore-gc", "pgc-fr", "pgc-cr")
ALIASES = {"gc-fr": "fr", "gc-cr": "cr"}


def build(scheme: str, n: int, s: int, *, seed: int = 0, tries: int = 8, decoder: str | None = None,
          deadline: Deadline | None = None) -> GradientCode:
    """The code of a named scheme. ``decoder`` applies to pgc-cr: ``linear`` (as published, the
    default in training) or ``lstsq`` (exact, CR's random B), and to approx: ``lstsq`` (optimal,
    the default) or ``linear`` (fixed). ``deadline`` bounds CR's seed search
    (``cyclic.best_cyclic``); ``seed`` draws CR's matrices and approx's graph."""
    if not isinstance(n, int) or n < 1:
        raise InputError("--n", "", f"need at least one worker, got {n}")
    if not 0 <= s < n:
        raise InputError("--s", "", f"s = {s} must satisfy 0 <= s < n = {n}")
    name = ALIASES.get(scheme, scheme)
    if decoder is not None and name not in ("pgc-cr", "approx"):
        raise InputError("--decoder", "", f"only pgc-cr and approx take a decoder choice, not {scheme}")
    if name in ("cr", "cyclic-mds") or (name in ("pgc-cr", "approx") and (decoder or "lstsq") == "lstsq"):
        check_lstsq_size(n, "--scheme", "", scheme + (" with --decoder lstsq" if decoder else ""))
    if name == "fr":
        code = fractional_repetition(n, s)
    elif name == "cr":
        code = cyclic_repetition(n, s, seed=seed, tries=tries, deadline=deadline)
    elif name == "pgc-fr":
        code = pgc_fr(n, s)
    elif name == "pgc-cr":
        code = pgc_cr(n, s, seed=seed, tries=tries, decoder=decoder or "lstsq", deadline=deadline)
    elif name == "cyclic-mds":
        code = cyclic_mds(n, s)
    elif name == "approx":
        code = sparse_graph_code(n, s, seed=seed, decoder=decoder or "lstsq")
    elif name == "uncoded":
        code = uncoded(n)
    elif name == "ignore-sgd":
        code = ignore_stragglers_sgd(n, s)
    elif name == "ignore-gc":
        code = ignore_stragglers_gc(n, s)
    else:
        known = ", ".join(dict.fromkeys(PLACEMENTS + TRAINING))
        raise InputError("--scheme", "", f"unknown scheme {scheme!r} (known: {known}, solver)")
    return code
