"""A multi-network instance: several mapping instances on one SoC, run at the same time.

Each network keeps its own pipeline (stages, PU sets) as in a single mapping plan; the networks
share the platform's PUs in one of two ways (``sharing``):

* ``partitioned``: every PU serves at most one network (HaX-CoNN's and Puzzle's partitions);
* ``time_shared``: a PU may serve several networks; per second it must fit the work of all of
  them (sum over networks of rate x the network's busy time per frame on that PU <= 1 s).

Per network: a ``weight`` (> 0, for the weighted total throughput), an optional deadline
``latency_ms`` (on the worst-case latency under sharing, evaluator.py) and an optional demanded
rate ``min_fps`` (the plan must serve every network at its demanded rate at once).

The reference rate of a network (``reference_fps``, what "normalised throughput" divides by) is
its rate alone on the SoC on its best single PU (every unit there, one stage), as HaX-CoNN
normalises by standalone runs; a file may give its own.

Plain frozen data; the evaluator (evaluator.py) scores joint plans.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from pipeplan.core.errors import InputError, brief_value
from pipeplan.core.io import check_fields, check_name, finite_number
from pipeplan.formulations.mapping.evaluator import evaluate
from pipeplan.formulations.mapping.plan import plan_from_assignment
from pipeplan.formulations.mapping.problem import MappingProblem

T = TypeVar("T")

MULTI_SCHEMA = "pipeplan.multi-instance/1"
SHARING = ("time_shared", "partitioned")
# networks of one instance: a SoC runs a handful at once (the catalogue: 2 or 3), and each one is
# a whole mapping instance to load and check (about 1 ms each) before any time limit runs; at
# 1,000 each already gets under a thousandth of a PU's time
MAX_NETWORKS = 1000
NETWORK_FIELDS = ("name", "instance", "weight", "latency_ms", "min_fps", "reference_fps", "model")
# weights are relative: a million to one leaves the lighter network no say in the weighted
# total, and near 1e308 x fps the total overflows to infinity
MAX_WEIGHT = 1e6
# a reference rate outside this range makes the normalised throughput (rate / reference)
# overflow or vanish: 1000 / reference_fps is a period in ms
REFERENCE_FPS = (1e-6, 1e6)


@dataclass(frozen=True)
class Network:
    name: str
    problem: MappingProblem
    weight: float = 1.0
    latency_ms: float | None = None
    min_fps: float | None = None
    reference_fps: float | None = None     # None: alone on its best single PU (evaluator.reference_fps)
    instance: str = ""                     # how the file named the instance (kept for to_dict)
    model: str = ""                        # the ONNX model behind an instance file (export only)

    def least_work_ms(self) -> float:
        """No plan gives a frame less PU time than this: every unit on its fastest PU (top
        level), at the smallest whole-graph share."""
        prof = self.problem.profile
        share = min([1.0] + list(prof.whole_graph.values()))
        return share * sum(min(t for p, pu in prof.pus.items() if (t := prof.time(u, p, pu.max_level)) is not None)
                           for u in range(len(self.problem.units)))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "instance": self.instance or self.problem.name,
                               "weight": self.weight}
        for key in ("latency_ms", "min_fps", "reference_fps"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.model:
            out["model"] = self.model
        return out


@dataclass(frozen=True)
class MultiProblem:
    name: str
    networks: tuple[Network, ...]
    sharing: str = "time_shared"
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    kind = "multi"

    def __post_init__(self):
        where = self.source or self.name
        if self.sharing not in SHARING:
            raise InputError(where, "sharing", f"must be one of {', '.join(SHARING)}, got {self.sharing!r}")
        if not self.networks:
            raise InputError(where, "networks", "expected at least one network")
        if len(self.networks) > MAX_NETWORKS:
            raise InputError(where, "networks", f"{len(self.networks)} networks, at most {MAX_NETWORKS}")
        seen: set[str] = set()
        least_ms: dict[int, object] = {}     # per model: networks of one model share its problem
        for i, n in enumerate(self.networks):
            fld = f"networks[{i}]"
            if not n.name or n.name in seen:
                raise InputError(where, f"{fld}.name", f"missing or duplicate network name {n.name!r}")
            seen.add(n.name)
            _positive(where, f"{fld}.weight", n.weight, most=MAX_WEIGHT)
            # past the reference range a demanded period (1000 / min_fps) or a deadline overflowed
            # the exact models' integer times (min_fps 1e-320, latency_ms 1e308: exit 1)
            if n.min_fps is not None:
                _positive(where, f"{fld}.min_fps", n.min_fps, *REFERENCE_FPS)
            if n.latency_ms is not None:
                _positive(where, f"{fld}.latency_ms", n.latency_ms, most=1000.0 / REFERENCE_FPS[0])
            if n.reference_fps is not None:
                _positive(where, f"{fld}.reference_fps", n.reference_fps, *REFERENCE_FPS)
            prof = n.problem.profile
            for u, unit in enumerate(n.problem.units):
                if not any(prof.can_run(u, p) for p in prof.pus):
                    raise InputError(where, f"{fld}.instance", f"no PU can run unit {unit.name} of {n.problem.name}")
            self._check_rates(where, fld, n, least_ms)
        self._check_demands(where)
        # one SoC: a PU name means the same processor in every network's profile
        kinds: dict[str, tuple[str, str]] = {}
        for i, n in enumerate(self.networks):
            for p, pu in n.problem.profile.pus.items():
                if p in kinds and kinds[p][0] != pu.kind:
                    raise InputError(where, f"networks[{i}].instance",
                                     f"PU {p!r} is a {pu.kind} here but a {kinds[p][0]} in {kinds[p][1]}: "
                                     "the networks must be profiled on one platform")
                kinds.setdefault(p, (pu.kind, n.name))

    @staticmethod
    def _check_rates(where: str, fld: str, n: "Network", least_ms: dict) -> None:
        """A network's rate stays within the range its rates are given in (``REFERENCE_FPS``):
        its least period (the analytic bound) at least 1000 / 1e6 ms, and its reference alone
        on its best single PU, where the file gives none, from 1e-6 to 1e6 fps. Zero (or
        denormal) times had made a rate infinite: the joint evaluator divided by zero (every
        multi solver's result an error, exit 1)."""
        from pipeplan.formulations.mapping.bounds import best_analytic

        if id(n.problem) not in least_ms:
            least_ms[id(n.problem)] = best_analytic(n.problem)["period_ms"]
        least = least_ms[id(n.problem)]
        if not least.value >= 1000.0 / REFERENCE_FPS[1]:
            raise InputError(where, f"{fld}.instance",
                             f"{n.name}'s period may be as short as {least.value:g} ms ({least.source}): a rate "
                             f"above {REFERENCE_FPS[1]:g} fps, which the normalised throughput cannot hold "
                             f"(a network must take at least {1000.0 / REFERENCE_FPS[1]:g} ms a frame)")
        if n.reference_fps is not None or not single_pu_plans(n):    # the evaluator names the latter
            return
        rate = reference_fps(n)
        if not REFERENCE_FPS[0] <= rate <= REFERENCE_FPS[1]:
            raise InputError(where, f"{fld}.reference_fps",
                             f"not given, and alone on its best single PU {n.name} runs at {rate:g} fps, outside "
                             f"{REFERENCE_FPS[0]:g} to {REFERENCE_FPS[1]:g} (the normalised throughput divides by "
                             "it): give reference_fps")

    def _check_demands(self, where: str) -> None:
        """Deadlines and demanded rates no plan can meet, found before any solving: a network's
        period and latency are at least its analytic bounds (formulations/mapping/bounds.py),
        and the demanded rates need at least sum_i min_fps_i x W_i ms of PU time per second,
        W_i a frame's work with every unit on its fastest PU, which the PUs must hold."""
        from pipeplan.formulations.mapping.bounds import best_analytic

        need = 0.0
        pus = {p for n in self.networks for p in n.problem.profile.pus}
        for i, n in enumerate(self.networks):
            if n.min_fps is None and n.latency_ms is None:
                continue
            low = best_analytic(n.problem)
            period, latency = low["period_ms"].value, low["latency_ms"].value
            if n.min_fps is not None and n.min_fps * period > 1000.0 * (1 + 1e-9):
                raise InputError(where, f"networks[{i}].min_fps",
                                 f"{n.name} demands {n.min_fps:g} fps, but its period is at least {period:.3f} ms "
                                 f"({low['period_ms'].source}): at most {1000.0 / period:.3f} fps")
            if n.latency_ms is not None and latency > n.latency_ms * (1 + 1e-9):
                raise InputError(where, f"networks[{i}].latency_ms",
                                 f"{n.name}'s deadline {n.latency_ms:g} ms is below its least latency "
                                 f"{latency:.3f} ms ({low['latency_ms'].source})")
            if n.min_fps is not None:
                need += n.min_fps * n.least_work_ms()
        if need > 1000.0 * len(pus) * (1 + 1e-9):
            raise InputError(where, "networks", f"the demanded rates need at least {need:.0f} ms of PU time per "
                             f"second, and the {len(pus)} PUs have {1000 * len(pus)}")

    def per_model(self, work: Callable[[Network], T]) -> dict[int, T]:
        """``work(network)`` once per distinct instance, keyed by ``id(network.problem)``; the
        first network that runs it stands for the rest. Many networks may run one model
        (streams), and a file's networks that name one instance share it (instances/multi.py),
        so per-model work is done once, not once per network."""
        out: dict[int, T] = {}
        for n in self.networks:
            if id(n.problem) not in out:
                out[id(n.problem)] = work(n)
        return out

    @property
    def pu_names(self) -> tuple[str, ...]:
        """Every PU any network can use, in first-seen profile order."""
        return tuple(dict.fromkeys(p for n in self.networks for p in n.problem.profile.pus))

    def network(self, name: str) -> Network:
        for n in self.networks:
            if n.name == name:
                return n
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": MULTI_SCHEMA, "name": self.name, "sharing": self.sharing,
                "networks": [n.to_dict() for n in self.networks]}


def _positive(where: str, fld: str, value: Any, least: float = 0.0, most: float = math.inf) -> None:
    """A finite number > 0, and from ``least`` to ``most`` when they are given. A JSON integer
    beyond float range (10**400) is not finite here; math.isfinite had raised OverflowError."""
    if not finite_number(value) or value <= 0:
        raise InputError(where, fld, f"must be a finite number > 0, got {brief_value(value)}")
    if not least <= value <= most:
        raise InputError(where, fld, f"must be from {least:g} to {most:g}, got {brief_value(value)}")


MULTI_FIELDS = ("schema", "name", "sharing", "networks")      # what MultiProblem.to_dict writes


def multi_problem_from_dict(doc: Any, source: str, load: Callable[[str, str], MappingProblem]) -> MultiProblem:
    """A MultiProblem from its JSON form. ``load(instance, field)`` turns a network's
    ``instance`` (a catalogue name or a file next to the instance file) into its MappingProblem;
    the instances layer supplies it (it owns the catalogue and the path rules)."""
    if not isinstance(doc, dict):
        raise InputError(source, "", "expected a JSON object")
    if doc.get("schema") != MULTI_SCHEMA:
        raise InputError(source, "schema", f"unsupported schema {doc.get('schema')!r} (expected {MULTI_SCHEMA!r})")
    check_fields(doc, MULTI_FIELDS, source)     # a misspelt "sharng" had run time-shared without a word
    raw = doc.get("networks")
    if not isinstance(raw, list) or not raw:
        raise InputError(source, "networks", "expected a non-empty list of networks")
    if len(raw) > MAX_NETWORKS:       # before any network's instance is loaded
        raise InputError(source, "networks", f"{len(raw)} networks, at most {MAX_NETWORKS}")
    networks = []
    for i, d in enumerate(raw):
        fld = f"networks[{i}]"
        if not isinstance(d, dict):
            raise InputError(source, fld, "expected an object")
        check_fields(d, NETWORK_FIELDS, source, fld)
        inst = d.get("instance")
        if not isinstance(inst, str) or not inst:
            raise InputError(source, f"{fld}.instance", "expected an instance name or file")
        # an ESC or a newline had been printed raw in multi export's and run's lines
        name = check_name(d.get("name", inst.rsplit("/", 1)[-1].removesuffix(".json")), source, f"{fld}.name")
        model = d.get("model", "")
        if not isinstance(model, str):
            raise InputError(source, f"{fld}.model", "expected a model of the onnx wheel or an ONNX file name")
        problem = load(inst, f"{fld}.instance")
        networks.append(Network(name=name, problem=problem, weight=d.get("weight", 1.0),
                                latency_ms=d.get("latency_ms"), min_fps=d.get("min_fps"),
                                reference_fps=d.get("reference_fps"), instance=inst, model=model))
    sharing = doc.get("sharing", "time_shared")
    name = check_name(doc.get("name", ""), source, "name")
    return MultiProblem(name=name, networks=tuple(networks), sharing=sharing, source=source)


def single_pu_plans(network: Network) -> dict:
    """PU -> the plan with every unit of the network on that PU in one stage (PUs that run all)."""
    prob = network.problem
    names = tuple(u.name for u in prob.units)
    out = {}
    for p in prob.profile.pus:
        if all(prob.profile.can_run(i, p) for i in range(len(names))):
            out[p] = plan_from_assignment(names, dict.fromkeys(names, 0), dict.fromkeys(names, p),
                                          instance=prob.name)
    return out


_REFERENCES: dict[int, tuple[MappingProblem, float]] = {}    # id -> (the instance, kept alive; its rate)


def reference_fps(network: Network) -> float:
    """The network's reference rate: given in the file, else alone on its best single PU
    (computed once per instance: many networks may run one model)."""
    if network.reference_fps is not None:
        return network.reference_fps
    known = _REFERENCES.get(id(network.problem))
    if known is not None and known[0] is network.problem:
        return known[1]
    plans = single_pu_plans(network)
    if not plans:
        raise ValueError(f"network {network.name}: no single PU runs every unit; give reference_fps in the instance")
    rate = max(evaluate(network.problem, p).throughput_fps for p in plans.values())
    _REFERENCES[id(network.problem)] = (network.problem, rate)
    return rate
