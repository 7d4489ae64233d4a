"""What the gradient-coding training studies share: the target losses and the code of each
scheme as trained (``gradcode`` and ``gradcode_timing`` both train with them)."""
from __future__ import annotations

# Target training losses: what full-gradient descent (uncoded) reaches after about 85-90 steps
# with the default learning rates (softmax 2.0, MLP 1.0); chosen here, not from the paper.
TARGET_LOSS = {"softmax": 0.20, "mlp": 0.12}


def study_code(scheme: str, n: int, s: int):
    """The code of a training scheme: pgc-cr with its published linear decoder, pgc-cr-lstsq
    with least squares, the others as ``schemes.build`` makes them."""
    from pipeplan.solvers.gradcode.schemes import build
    if scheme == "pgc-cr":
        return build("pgc-cr", n, s, decoder="linear")
    if scheme == "pgc-cr-lstsq":
        return build("pgc-cr", n, s, decoder="lstsq")
    return build(scheme, n, s)
