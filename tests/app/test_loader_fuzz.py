"""Every JSON loader against random damage to a valid document: a field deleted, or its value
replaced by a wrong type, a negative, NaN or infinite number, an empty container. The loader
either accepts the document (and then a cheap solver or the runtime can use it) or raises
InputError; any other exception is a validation hole that would reach the user as a traceback."""
import copy
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pipeplan
from pipeplan.core.errors import InputError
from pipeplan.deploy.executor import run_export
from pipeplan.deploy.manifest import load_manifest
from pipeplan.deploy.runtime import pu_runtime
from pipeplan.formulations.gradcode.gradient_code import code_from_dict
from pipeplan.formulations.gradcode.problem import problem_from_dict as gradcode_problem
from pipeplan.formulations.mapping.instance_io import problem_from_dict as mapping_problem
from pipeplan.formulations.mapping.plan import plan_from_dict
from pipeplan.formulations.mapping.profile import profile_from_dict
from pipeplan.formulations.rollout.problem import problem_from_dict as rollout_problem
from pipeplan.profiles.roofline import platform_from_dict

GOOD = Path(__file__).parents[1] / "bad_inputs" / "good"


def _good(name):
    return json.loads((GOOD / name).read_text())


INSTANCE = _good("diamond.json")
INSTANCE["profile"] = _good("profile.json")          # inline, so one document holds both


def _paths(doc, prefix=()):
    """Every path to a value in a JSON document."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, prefix + (i,))


BAD_VALUES = [None, "x", -1, -0.5, 0, math.nan, math.inf, -math.inf, [], {}, True, 10**30, [None], {"x": 1}]


@st.composite
def damaged(draw, doc):
    doc = copy.deepcopy(doc)
    paths = [p for p in _paths(doc) if p]
    for _ in range(draw(st.integers(1, 2))):
        path = draw(st.sampled_from(paths))
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            if isinstance(parent, dict) and draw(st.booleans()):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = copy.deepcopy(draw(st.sampled_from(BAD_VALUES)))
        except (KeyError, IndexError, TypeError):
            pass                                  # an earlier damage removed this path
    return doc


def _mapping_instance(doc):
    problem = mapping_problem(doc, "fuzz.json")
    pipeplan.solve(problem, "heft", time_limit=5)


def _plan(doc):
    plan_from_dict(doc, "plan.json")


def _profile(doc):
    profile_from_dict(doc, "profile.json")


def _platform(doc):
    platform = platform_from_dict(doc, "platform.json")
    for pu in platform.pus:
        pu_runtime(platform, pu, "platform.json")


def _gradcode_problem(doc):
    problem = gradcode_problem(doc, "problem.json")
    pipeplan.solve(problem, "fr")


def _gradcode_code(doc):
    from pipeplan.formulations.gradcode.checker import violations
    from pipeplan.formulations.gradcode.verifier import verify
    code = code_from_dict(doc, "code.json")
    violations(code)
    verify(code)


def _rollout_problem(doc):
    problem = rollout_problem(doc, "problem.json")
    pipeplan.solve(problem, "cgp")


CASES = {
    "mapping-instance": (INSTANCE, _mapping_instance),
    "plan": (_good("diamond_plan.json"), _plan),
    "profile": (_good("profile.json"), _profile),
    "platform": (_good("host_platform.json"), _platform),
    "gradcode-problem": (_good("gradcode_problem.json"), _gradcode_problem),
    "gradcode-code": (_good("gradcode_code.json"), _gradcode_code),
    "rollout-problem": (_good("rollout_problem.json"), _rollout_problem),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_loader_accepts_or_raises_input_error(kind):
    original, use = CASES[kind]
    use(copy.deepcopy(original))            # the undamaged document works

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(damaged(original))
    def check(doc):
        try:
            use(doc)
        except InputError:
            pass
    check()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(doc=damaged(_good("manifest/manifest.json")))
def test_manifest_loader_accepts_or_raises_input_error(doc, tmp_path_factory):
    folder = tmp_path_factory.mktemp("manifest")
    for f in ("model_full.onnx", "stage0.onnx"):
        (folder / f).write_bytes((GOOD / "manifest" / f).read_bytes())
    (folder / "manifest.json").write_text(json.dumps(doc))
    try:
        load_manifest(folder)
    except InputError:
        return
    try:
        run_export(folder, frames=2, seed=0)      # what `pipeplan run` does with an accepted manifest
    except InputError:
        pass
