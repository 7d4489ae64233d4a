"""A catalogue of tiny mapping instances whose optima brute force can prove.

Each instance is small enough (<= 6 units, <= 3 PUs) that
``pipeplan.formulations.mapping.brute_force`` enumerates every plan; the exact solvers are
tested against those optima. Times are given in whole microseconds (ms with 3 decimals) so the
exact models' integer time scale represents them exactly.
"""
from __future__ import annotations

import random

from pipeplan.formulations.mapping.problem import Edge, MappingProblem, Unit
from pipeplan.formulations.mapping.profile import profile_from_dict


def _problem(name: str, times: dict[str, list], edges: list[tuple[str, str]], *, transfer: float,
             input_ms: dict[str, float], output_ms: dict[str, float], power: dict[str, list],
             power_model: str = "board", idle: dict[str, float] | None = None) -> MappingProblem:
    pus = list(times)
    n = len(times[pus[0]])
    units = [f"u{i}" for i in range(n)]
    doc = {
        "schema": "pipeplan.profile/1", "name": name, "power_model": power_model,
        "source": "synthetic (pipeplan.instances.tiny)",
        "pus": {p: {"kind": "cpu", "levels": ["max"], "idle_power_mw": (idle or {}).get(p, 0.0)} for p in pus},
        "units": units,
        "time_ms": {p: {"max": times[p]} for p in pus},
        "power_mw": {p: {"max": power[p]} for p in pus},
        "input_stage": {p: {"max": {"time_ms": input_ms[p], "power_mw": 2000.0}} for p in pus},
        "output_stage": {p: {"max": {"time_ms": output_ms[p], "power_mw": 2000.0}} for p in pus},
        "transfers": {"default": {"fixed_ms": transfer, "ms_per_mb": 0.0}, "power_mw": 1500.0},
    }
    prof = profile_from_dict(doc, name)
    return MappingProblem(name=name, units=tuple(Unit(u) for u in units),
                          edges=tuple(Edge(a, b, None) for a, b in edges), profile=prof, source=name)


def _random(name: str, seed: int, n: int, pus: tuple[str, ...], edges: list[tuple[int, int]],
            power_model: str = "board", forbid: int = 0) -> MappingProblem:
    rng = random.Random(seed)
    times = {p: [round(rng.uniform(1, 9), 3) for _ in range(n)] for p in pus}
    for _ in range(forbid):  # some units cannot run on some PUs (an NPU without an op)
        u, p = rng.randrange(1, n), rng.choice(pus[1:])
        times[p][u] = None
    power = {p: [round(rng.uniform(500, 3000), 1) for _ in range(n)] for p in pus}
    return _problem(name, times, [(f"u{a}", f"u{b}") for a, b in edges], transfer=round(rng.uniform(0.2, 1.5), 3),
                    input_ms={p: round(rng.uniform(0.5, 2), 3) for p in pus},
                    output_ms={p: round(rng.uniform(0.1, 0.5), 3) for p in pus}, power=power,
                    power_model=power_model, idle={p: round(rng.uniform(50, 300), 1) for p in pus})


CHAIN4 = [(0, 1), (1, 2), (2, 3)]
CHAIN5 = CHAIN4 + [(3, 4)]
DIAMOND = [(0, 1), (0, 2), (1, 3), (2, 3)]
FORK5 = [(0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (3, 4)]
INCEPTIONISH = [(0, 1), (0, 2), (1, 3), (2, 3), (3, 4)]


def tiny_catalogue() -> list[MappingProblem]:
    """Tiny instances: chains, a diamond, a fork and a small module, 2-3 PUs, both power models."""
    return [
        _random("tiny/chain4-2pu", 1, 4, ("A", "B"), CHAIN4),
        _random("tiny/chain4-3pu", 2, 4, ("A", "B", "C"), CHAIN4),
        _random("tiny/chain5-3pu", 3, 5, ("A", "B", "C"), CHAIN5, forbid=2),
        _random("tiny/diamond-2pu", 4, 4, ("A", "B"), DIAMOND),
        _random("tiny/diamond-3pu", 5, 4, ("A", "B", "C"), DIAMOND, power_model="per_pu"),
        _random("tiny/fork5-2pu", 6, 5, ("A", "B"), FORK5),
        _random("tiny/module5-3pu", 7, 5, ("A", "B", "C"), INCEPTIONISH, forbid=1),
    ]
