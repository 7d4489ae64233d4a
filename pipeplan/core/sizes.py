"""Refusing work that would exhaust the machine, from an estimate made before anything is
allocated.

Each command that allocates in proportion to an option (``--steps``, ``--samples``, ``--frames``,
``--jobs``, ...) states what one unit of it costs; :func:`check_memory` compares the estimate
with the memory cap and refuses with a one-line error naming the option, the estimate and the
largest value that fits. The cap is ``PIPEPLAN_MAX_MEMORY_MB`` when set, otherwise half of this
machine's physical memory (so one command never pushes the machine into swap on its own).
"""
from __future__ import annotations

import math
import os

from pipeplan.core.errors import InputError

# Peak memory of one worker process of `bench --jobs` or `rollout regimes --jobs` (results/limits.md:
# 60-200 MB per bench run on the quick suite's sizes)
WORKER_PROCESS_BYTES = 256 << 20


# The largest cap an environment variable may set: a petabyte. 1e308 MiB had overflowed to an
# infinite number of bytes (OverflowError), and 1e13 MiB passed 64 bits where a cap reaches C.
MAX_CAP_MB = 1e9


def bytes_from_env(name: str) -> int | None:
    """A cap set in the environment as a positive number of MiB (None when unset)."""
    raw = os.environ.get(name, "")
    if not raw:
        return None
    try:
        mb = float(raw)
    except ValueError:
        mb = float("nan")
    if not (math.isfinite(mb) and 0 < mb <= MAX_CAP_MB):
        raise InputError(name, "", f"must be a positive number of MiB, at most {MAX_CAP_MB:g}, got {raw!r}")
    return int(mb * (1 << 20))


def memory_cap_bytes() -> int:
    cap = bytes_from_env("PIPEPLAN_MAX_MEMORY_MB")
    if cap is not None:
        return cap
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} PiB"


def check_memory(option: str, value: int, bytes_each: float, *, fixed: float = 0.0) -> None:
    """Refuse ``option`` = ``value`` when ``value * bytes_each + fixed`` bytes exceed the cap."""
    cap = memory_cap_bytes()
    need = value * bytes_each + fixed
    if need > cap:
        largest = max(0, int((cap - fixed) // bytes_each)) if bytes_each > 0 else 0
        raise InputError(option, "", f"{value} needs about {human_bytes(need)} of memory, above the limit of {human_bytes(cap)} "
                                     f"(largest that fits: {largest}; raise the limit with PIPEPLAN_MAX_MEMORY_MB)")


def check_bytes(source: str, field: str, what: str, need: float) -> None:
    """Refuse ``need`` bytes above the cap for something a file asks for (not an option's
    value): ``error: SOURCE: FIELD: WHAT needs about ..., above the limit of ...``."""
    cap = memory_cap_bytes()
    if need > cap:
        raise InputError(source, field, f"{what} needs about {human_bytes(need)} of memory, above the limit of "
                                        f"{human_bytes(cap)} (raise the limit with PIPEPLAN_MAX_MEMORY_MB)")
