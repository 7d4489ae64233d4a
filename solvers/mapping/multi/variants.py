"""The joint plan space of the exact models, split into parts on which every rule is linear.

Each network's chain splits into the variants of the single-network models
(solvers/mapping/chain_options.py: one or several segments on a re-entry PU, the whole graph as
one compiled graph). Sharing adds one rule (formulations/mapping/multi/evaluator.py): a
re-entry PU that two networks use is *evicted* for both, so the first unit of every segment
there is cold even when the network holds one segment. Per network the joint variants are:

* **warm**: the single-network variant as it is, with its one-segment re-entry PUs (and the
  whole-graph PU) *exclusive*: if this network uses such a PU, no other network does;
* **evicted**: for every re-entry PU the variant treats as several segments, the count rule
  (two or more cold starts) is dropped, so cold marks every segment start, one segment too.
  This prices a plan exactly when the PU is shared, and at most its true cost plus the cold
  penalty otherwise (then the warm variant holds the plan at its true cost);
* **whole graph, evicted**: the whole-graph plan with its first unit cold.

Every joint plan lies in some combination of variants that prices it exactly, and every
combination prices its plans at or above their true cost, so the best over all combinations
is the joint optimum. Partitioned instances never share a PU: only the single-network variants.

A busy time per frame on a PU counts the units' times only (the evaluator's ``pu_busy_ms``):
an option's time less the input/output phase it carries.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

from pipeplan.formulations.mapping.multi.problem import MultiProblem, Network
from pipeplan.solvers.mapping.chain_options import Option, Variant, variants

MAX_COMBINATIONS = 1 << 16   # 30 networks of one to two variants each: 3.6 s, 260 MB to set up (3 s limit)


@dataclass(frozen=True)
class JointVariant:
    network: Network
    variant: Variant
    exclusive: tuple[str, ...]      # PUs no other network may use when this network uses them

    @property
    def name(self) -> str:
        extra = f" (exclusive {'/'.join(self.exclusive)})" if self.exclusive else ""
        return f"{self.network.name}: {self.variant.name}{extra}"

    def busy(self, i: int, k: int) -> float:
        """ms of PU time of unit i's option k (no input/output phase)."""
        o = self.variant.options[i][k]
        return o.time - _phase(self.network.problem.profile, o, i, len(self.variant.options))


def network_variants(problem: MultiProblem, net: Network, base: list[Variant] | None = None) -> list[JointVariant]:
    """The joint variants of one network (module docstring); top DVFS levels. ``base``: its
    model's single-network variants, when already known."""
    base = variants(net.problem, dvfs=False) if base is None else base
    prof = net.problem.profile
    if problem.sharing == "partitioned":
        return [JointVariant(net, v, ()) for v in base]
    out = []
    for v in base:
        if v.single_stage:
            pu = v.options[0][0].pu
            reentry = pu in prof.reentry
            out.append(JointVariant(net, v, (pu,) if reentry else ()))
            if reentry:
                out.append(JointVariant(net, _first_cold(net, v, pu), ()))
        elif v.many_segments:
            out.append(JointVariant(net, replace(v, name=v.name + "; evicted", min_cold=0), tuple(v.one_segment)))
        else:
            out.append(JointVariant(net, v, tuple(v.one_segment)))
    return out


def _first_cold(net: Network, v: Variant, pu: str) -> Variant:
    """The whole-graph variant with its first unit cold (another network evicts the graph)."""
    k = net.problem.profile.reentry[pu]
    prof = net.problem.profile
    first = []
    for o in v.options[0]:
        unit = o.time - _phase(prof, o, 0, len(v.options))
        power = prof.power(0, o.pu, o.level)
        first.append(Option(o.pu, o.level, True, o.time + unit * k, o.energy + unit * k * power))
    return replace(v, name=v.name + "; evicted", options=[first] + v.options[1:])


def _phase(prof, o: Option, i: int, n: int) -> float:
    out = 0.0
    for table, end in ((prof.input_stage, 0), (prof.output_stage, n - 1)):
        ph = table.get(o.pu, {}).get(o.level) if i == end else None
        if ph:
            out += ph.time_ms
    return out


def combinations(problem: MultiProblem) -> list[tuple[JointVariant, ...]]:
    """Every combination of one joint variant per network; the cheap ones first (whole-graph
    variants are single plans), so that they give the larger models an incumbent to beat.
    ValueError beyond ``MAX_COMBINATIONS``: their number multiplies with every network, and
    the exact models prove nothing before each one's model is closed."""
    base = problem.per_model(lambda n: variants(n.problem, dvfs=False))
    per_net = [network_variants(problem, n, base[id(n.problem)]) for n in problem.networks]
    count = math.prod(map(len, per_net))
    if count > MAX_COMBINATIONS:
        raise ValueError(f"{len(per_net)} networks make {count:.3g} variant combinations, more than the "
                         f"{MAX_COMBINATIONS:,} the exact joint models solve one by one: use nsga2 or a baseline")
    combos = list(itertools.product(*per_net))
    return sorted(combos, key=lambda c: -sum(jv.variant.single_stage for jv in c))
