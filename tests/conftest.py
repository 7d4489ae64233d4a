"""Registry-wide parametrisation. A test marked ``@pytest.mark.solvers("mapping", exact=True)``
runs once per registered, available solver of that system and kind, as its ``solver``
argument; ``@pytest.mark.solvers()`` runs over every system as ``system, solver``.

``pytest --solvers cpsat,heft`` (or ``--solvers mapping/cpsat``) keeps only those solvers, as
PyJobShop's ``--solvers`` option does for its backends; the default is every available solver.
"""
from __future__ import annotations

import os

from hypothesis import settings

from pipeplan.core.registry import solvers
from pipeplan.core.vocabulary import SYSTEMS

# Under CI (the CI variable set, as .ci/run does) hypothesis draws the same examples every run, so
# the suite's time and outcome are those of the commit; elsewhere it explores new ones, which is
# how a round that made HiGHS loop past its time limit in the step bound was found.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


def pytest_addoption(parser):
    parser.addoption("--solvers", default="", metavar="NAMES",
                     help="comma-separated solvers (name or system/name) for the registry-wide tests; "
                          "default: every available solver")


def pytest_configure(config):
    config.addinivalue_line("markers", "solvers(system=None, exact=None): run once per registered solver "
                                       "(of a system; exact or heuristic ones only)")


def registered(config, system: str, exact: bool | None = None) -> list[str]:
    """Available solvers of ``system`` (exact or heuristic only, unless None) that --solvers keeps."""
    chosen = [c.strip() for c in config.getoption("--solvers").split(",") if c.strip()]
    return [s.name for s in solvers(system)
            if s.available()[0] and (exact is None or s.exact == exact)
            and (not chosen or s.name in chosen or f"{system}/{s.name}" in chosen)]


def pytest_generate_tests(metafunc):
    marker = metafunc.definition.get_closest_marker("solvers")
    if marker is None:
        return
    system = marker.args[0] if marker.args else marker.kwargs.get("system")
    exact = marker.kwargs.get("exact")
    if system is not None:
        metafunc.parametrize("solver", registered(metafunc.config, system, exact))
    else:
        pairs = [(s, name) for s in SYSTEMS for name in registered(metafunc.config, s, exact)]
        metafunc.parametrize("system,solver", pairs, ids=[f"{a}/{b}" for a, b in pairs])
