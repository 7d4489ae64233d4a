"""Tiny mapping instances built in code, with numbers small enough to check by hand."""
from pipeplan.formulations.mapping.problem import Edge, MappingProblem, Unit
from pipeplan.formulations.mapping.profile import profile_from_dict


def tiny_problem(times: dict[str, list], edges=None, *, power=None, transfer=0.0, input_ms=None,
                 output_ms=None, power_model="board", idle=None, name="tiny") -> MappingProblem:
    """``times`` maps PU name -> per-unit times (ms) at one level "max"; edges default to a chain."""
    pus = list(times)
    n = len(next(iter(times.values())))
    units = [f"u{i}" for i in range(n)]
    edges = edges if edges is not None else [(units[i], units[i + 1]) for i in range(n - 1)]
    doc = {
        "schema": "pipeplan.profile/1", "name": name, "power_model": power_model,
        "pus": {p: {"kind": "cpu", "levels": ["max"], "idle_power_mw": (idle or {}).get(p, 0.0)} for p in pus},
        "units": units,
        "time_ms": {p: {"max": times[p]} for p in pus},
        "power_mw": {p: {"max": (power or {}).get(p, [1000.0] * n)} for p in pus},
        "transfers": {"default": {"fixed_ms": transfer, "ms_per_mb": 0.0}, "power_mw": 500.0},
    }
    if input_ms is not None:
        doc["input_stage"] = {p: {"max": {"time_ms": input_ms[p], "power_mw": 1000.0}} for p in pus}
    if output_ms is not None:
        doc["output_stage"] = {p: {"max": {"time_ms": output_ms[p], "power_mw": 1000.0}} for p in pus}
    prof = profile_from_dict(doc, name)
    return MappingProblem(name=name, units=tuple(Unit(u) for u in units),
                          edges=tuple(Edge(a, b, None) for a, b in edges), profile=prof, source=name)
