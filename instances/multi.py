"""Multi-network instances (several DNNs on one SoC): the shipped files under instances/multi/
and the loader of user files.

A network's ``instance`` is a catalogue name (``khadas-vim3/YOLOv3``, ``host/bvlc_alexnet``) or
a mapping instance file inside the multi-instance file's folder; a path that leads out of that
folder (``..``, an absolute path, a link) is refused before anything is opened.
"""
from __future__ import annotations

from pathlib import Path

from pipeplan.core.errors import InputError
from pipeplan.core.io import exists_safely, inside_folder, instance_name, load_json
from pipeplan.formulations.mapping.multi.problem import MultiProblem, multi_problem_from_dict
from pipeplan.instances.catalog import load_mapping
from pipeplan.instances.paths import INSTANCES_DIR

MULTI_DIR = INSTANCES_DIR / "multi"


def multi_names() -> list[str]:
    return sorted(f"multi/{p.stem}" for p in MULTI_DIR.glob("*.json"))


def load_multi_file(path: str | Path) -> MultiProblem:
    path = Path(path)
    source = str(path)
    loaded: dict[str, object] = {}     # networks that name one instance share it (and its per-model work)

    def load_one(instance: str, field: str):
        # the file test is the loader's own (pathlib's suffix): by the text's ending, "x.json/"
        # had passed as a catalogue name, and load_mapping then read x.json from anywhere
        if Path(instance).suffix == ".json":
            return load_mapping(str(inside_folder(path.parent, instance, source, field)))
        try:
            return load_mapping(instance)
        except InputError as exc:
            raise InputError(source, field, exc.message) from None

    def load(instance: str, field: str):
        if instance not in loaded:
            loaded[instance] = load_one(instance, field)
        return loaded[instance]

    return multi_problem_from_dict(load_json(path), source, load)


def load_multi(name: str) -> MultiProblem:
    """A MultiProblem from a catalogue name (``multi/yolo+mobile``) or a file path."""
    name = instance_name(name)
    path = Path(name)
    if path.suffix == ".json" and exists_safely(path):
        return load_multi_file(path)
    # a catalogue name, never a path (as khadas-vim3/..): multi/../khadas-vim3/InceptionV3 had
    # been read as a multi-network instance
    if name.startswith("multi/") and "/" not in name[6:] and name[6:] not in ("", ".", "..") \
            and exists_safely(MULTI_DIR / f"{name[6:]}.json", file=True):
        problem = load_multi_file(MULTI_DIR / f"{name[6:]}.json")
        return problem
    raise InputError(name, "instance", f"unknown multi-network instance (known: {', '.join(multi_names())})")


def tiny_multi() -> list[MultiProblem]:
    """Tiny multi-network instances whose joint optima brute force proves
    (formulations/mapping/multi/brute_force.py): two or three tiny chains on PUs A, B, C, time-
    shared and partitioned; one with a re-entry PU (B holds one compiled graph: every segment
    start that finds another graph loaded costs 1.5 x more) and a whole-graph share; one with a
    deadline and demanded rates."""
    from dataclasses import replace

    from pipeplan.formulations.mapping.multi.problem import Network
    from pipeplan.instances.tiny import _random

    def chain(name: str, seed: int, n: int, pus=("A", "B", "C"), reentry: bool = False):
        p = _random(name, seed, n, pus, [(i, i + 1) for i in range(n - 1)])
        if reentry:     # B an NPU: one compiled graph at a time, the whole graph faster
            pus = {**p.profile.pus, "B": replace(p.profile.pus["B"], kind="npu")}
            p = replace(p, profile=replace(p.profile, pus=pus, reentry={"B": 1.5}, whole_graph={"B": 0.6}))
        return p

    a3, b3, c3 = chain("tiny/a3", 11, 3), chain("tiny/b3", 12, 3), chain("tiny/c3", 13, 3, pus=("A", "B"))
    ra, rb = chain("tiny/ra3", 14, 3, reentry=True), chain("tiny/rb4", 15, 4, reentry=True)
    out = [
        MultiProblem("tiny-multi/pair", (Network("a", a3), Network("b", b3, weight=2.0))),
        MultiProblem("tiny-multi/pair-partitioned", (Network("a", a3), Network("b", b3)), sharing="partitioned"),
        MultiProblem("tiny-multi/triple", (Network("a", a3), Network("b", b3), Network("c", c3))),
        MultiProblem("tiny-multi/reentry", (Network("a", ra), Network("b", rb))),
    ]
    # a deadline and demanded rates: half of b's rate alone, a's latency alone on A + 30%
    base = MultiProblem("tiny-multi/demands", (Network("a", ra), Network("b", rb)))
    from pipeplan.formulations.mapping.evaluator import evaluate
    from pipeplan.formulations.mapping.multi.problem import reference_fps, single_pu_plans
    lat_a = evaluate(ra, single_pu_plans(base.networks[0])["A"]).latency_ms
    out.append(replace(base, networks=(Network("a", ra, latency_ms=round(1.3 * lat_a, 3)),
                                       Network("b", rb, min_fps=round(0.5 * reference_fps(base.networks[1]), 3)))))
    return out
