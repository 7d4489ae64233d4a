"""The DVFS study (``python -m pipeplan.solvers.mapping.dvfs_study``) runs end to end on the
packaged instances: it had read them as a user's files and refused every one (their profiles
lie outside the instance folder), a traceback before any solve."""
import json

from pipeplan.instances.catalog import load_mapping
from pipeplan.solvers.mapping import dvfs_study


def test_every_network_of_the_study_loads_as_the_catalogue_has_it():
    for name in dvfs_study.NETWORKS:
        assert dvfs_study.load_network(name).profile == load_mapping(f"khadas-vim3/{name}").profile


def test_the_study_writes_its_files_and_dvfs_never_costs_energy(tmp_path):
    dvfs_study.main(["--out", str(tmp_path), "--networks", "Alex", "--time-limit", "8",
                     "--front-limit", "5", "--threads", "1"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dvfs.json", "dvfs.md", "dvfs_Alex.png"]
    rec = json.loads((tmp_path / "dvfs.json").read_text())["networks"][0]
    by = {(r["objective"], r["dvfs"]): r for r in rec["at_p_star"]}
    top, chosen = by[("energy", False)], by[("energy", True)]
    assert top["quality"] == chosen["quality"] == "proven_optimal"
    assert chosen["value"] <= top["value"] * (1 + 1e-6)     # the top levels are one choice of levels
    assert by[("energy_ss", True)]["value"] <= by[("energy_ss", False)]["value"] * (1 + 1e-6) \
        or by[("energy_ss", True)]["quality"] != "proven_optimal"
    for r in rec["at_p_star"] + rec["front"]:      # each plan keeps its period cap
        assert r["objectives"]["period_ms"] <= r["period_cap_ms"] * (1 + 1e-6)
