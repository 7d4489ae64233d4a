"""Heuristic-versus-exact comparisons of mapping solvers (``pipeplan compare``), exact fronts
(``pipeplan pareto``) and the study committed under results/mapping/ (``pipeplan study``).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pipeplan
from pipeplan.app.figures import pareto_plot
from pipeplan.app.stored_optima import read_optima, references
from pipeplan.app.studies.energy_efficiency import ENERGY_HEADERS, PAPER_NOTE, energy_efficiency, gains_lines
from pipeplan.core.errors import SolverFailure
from pipeplan.core.io import write_atomic, write_json
from pipeplan.core.result import SolveResult
from pipeplan.core.tables import cell, csv_text, markdown_table
from pipeplan.core.vocabulary import MAPPING_KEYS as AXES

COLUMNS = ("solver", "termination", "quality", "period_ms", "latency_ms", "energy_mj", "energy_ss_mj", "bound",
           "gap", "wall_time_s")


def slug(name: str) -> str:
    """A folder name for an instance name: '/' as '__'; a name that would not make one plain
    folder name ('', '.', '..', over 120 bytes: an instance file's name is its path) keeps its
    first 100 bytes and a hash of the whole name."""
    s = name.replace("/", "__")
    if len(s.encode()) > 120 or not s.strip("."):
        s = f"{s.encode()[:100].decode('utf-8', 'ignore')}-{hashlib.sha256(name.encode()).hexdigest()[:12]}".lstrip(".")
    return s


def run_solvers(problem, names: list[str], *, time_limit: float, threads: int, seed: int,
                objective: str = "period", progress=None, params: dict[str, dict] | None = None) -> dict[str, SolveResult]:
    """Heuristics first; every exact solver then starts from the best top-level heuristic plan
    of this run, so both exact backends are compared on an equal footing (a plan with DVFS
    levels is outside the exact models' space). ``params``: solver -> its own parameters
    (``{"nsga2": {"dvfs": True}}``)."""
    from pipeplan.core.registry import get_solver
    from pipeplan.formulations.mapping.plan import plan_from_dict

    order = sorted(names, key=lambda n: get_solver("mapping", n).exact)
    out: dict[str, SolveResult] = {}
    key = AXES[objective]
    for i, name in enumerate(order):
        if progress:
            progress(i, len(order), name)
        warm = None
        if get_solver("mapping", name).exact:
            found = [r for n, r in out.items()
                     if r.plan and key in r.objectives and not get_solver("mapping", n).exact
                     and not r.params.get("dvfs")]
            warm = plan_from_dict(min(found, key=lambda r: r.objectives[key]).plan) if found else None
        out[name] = pipeplan.solve(problem, name, time_limit=time_limit, threads=threads, seed=seed,
                                   objective=objective, warm_start=warm, **(params or {}).get(name, {}))
    return {n: out[n] for n in names}


def result_rows(results: dict[str, SolveResult], objective: str = "period") -> list[dict]:
    """One row per solver. ``bound`` and ``gap`` are against the best certified bound of the run
    (the best proven optimum, else the highest lower bound an exact solver proved), the same for
    every solver; without one, no gap is shown (a heuristic's own analytic bound is too weak to
    say how far it is from the optimum), nor for a run that chose DVFS levels (the bound is over
    plans at the top levels)."""
    key = AXES[objective]
    instance = next(iter(results.values())).instance if results else ""
    certified = certified_bound(results, key, references(read_optima()).get((instance, key)))
    rows = []
    for name, r in results.items():
        o = r.objectives
        value = o.get(key)
        gap = None if certified is None or not value or r.params.get("dvfs") else max(0.0, (value - certified) / value)
        rows.append({"solver": label(name, r), "termination": r.termination.value,
                     "quality": r.quality.value, "period_ms": o.get("period_ms"), "latency_ms": o.get("latency_ms"),
                     "energy_mj": o.get("energy_mj"), "energy_ss_mj": o.get("energy_ss_mj"), "bound": certified,
                     "gap": gap, "wall_time_s": r.wall_time_s, "message": r.message})
    return rows


def certified_bound(results: dict[str, SolveResult], key: str, stored: dict | None = None) -> float | None:
    """The best certified lower bound of ``key``: a proven optimum (of a result, or ``stored``,
    the instance's row of results/mapping/optima.csv), else the highest bound an exact solver
    reported or the stored bound (None when nothing certifies one)."""
    from pipeplan.core.registry import get_solver

    proven = [r.objectives[key] for r in results.values() if r.quality.value == "proven_optimal" and key in r.objectives]
    if stored and stored.get("status") == "optimal" and stored.get("value"):
        proven.append(stored["value"])
    if proven:
        return min(proven)
    bounds = [r.bound[key] for n, r in results.items() if get_solver("mapping", n).exact and key in (r.bound or {})]
    if stored and stored.get("bound"):
        bounds.append(stored["bound"])
    return max(bounds) if bounds else None


def results_markdown(rows: list[dict], *, has_power: bool = True) -> str:
    """The solvers' table of ``pipeplan compare`` (rows from ``result_rows``): both energies,
    per frame (as the board measures one inference) and in steady state (a running pipeline's
    energy per inference); ``n/a`` when the profile holds no power figures."""
    def energy(value):
        return cell(value, ".1f") if has_power else "n/a"

    return "\n".join(markdown_table(
        ("solver", "status", "period (ms)", "latency (ms)", *ENERGY_HEADERS, "certified bound", "gap", "time (s)"),
        ([r["solver"], f"{r['termination']}/{r['quality']}", cell(r["period_ms"]), cell(r["latency_ms"]),
          energy(r["energy_mj"]), energy(r["energy_ss_mj"]), cell(r["bound"]),
          "-" if r["gap"] is None else f"{100 * r['gap']:.2f}%", cell(r["wall_time_s"])] for r in rows))) + "\n"


def front_csv(points: list[dict], x: str, y: str) -> str:
    """A front: both objectives, whether the point is proven, its stages and, for a front with
    DVFS levels, the units below their PU's top level (``b1=4.4 b5=3``)."""
    columns = (AXES[x], AXES[y], "proven", "mapping_or_stages")
    if any(p["plan"].get("levels") for p in points):
        columns += ("levels",)
    return csv_text(({columns[0]: float(p["objectives"][AXES[x]]), columns[1]: float(p["objectives"][AXES[y]]),
                      "proven": p.get("proven", ""),
                      "mapping_or_stages": " | ".join("+".join(s["pus"]) for s in p["plan"]["stages"]),
                      "levels": " ".join(f"{u}={lv}" for u, lv in p["plan"].get("levels", {}).items())}
                     for p in points), columns)


def compare(problem, names: list[str], out: Path, *, time_limit: float, threads: int, seed: int,
            front_time_limit: float | None = None, progress=None, objective: str = "period",
            params: dict[str, dict] | None = None) -> tuple[str, dict]:
    """Run the solvers (each minimising ``objective``, with its ``params``), write compare.csv,
    compare.md, results.json and pareto.png into ``out``; return the markdown table and the
    results (solver name -> SolveResult)."""
    from pipeplan.solvers.mapping.exact_front import exact_front

    results = run_solvers(problem, names, time_limit=time_limit, threads=threads, seed=seed, progress=progress,
                          objective=objective, params=params)
    rows = result_rows(results, objective)
    try:
        exact = exact_front(problem, "period", "latency", time_limit=front_time_limit or time_limit,
                            threads=threads, seed=seed)
        exact_note = front_note(exact)
    except Exception as exc:  # a solver failure is reported, the solvers' table still stands
        exact = {"points": [], "complete": False}
        exact_note = f"failed ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    # a front of other objectives is no (period, latency) front: its chosen plan is a point there
    approx = {n: [p["objectives"] for p in r.front] for n, r in results.items()
              if r.front and set(r.params.get("objectives", ())) == {"period", "latency"}}
    points = {label(n, r): r.objectives for n, r in results.items() if n not in approx and r.objectives}
    hv = hv_ratios(problem, exact["points"], approx) if exact["points"] else {"ref": None, "ratios": {}}
    options = (f" --objective {objective}" if objective != "period" else "") + (" --dvfs" if params else "")
    dvfs_note = ("\n`(dvfs)`: the solver chose DVFS levels; the certified bound holds for plans at the top levels "
                 "only, so no gap is shown for it.\n" if any(r.params.get("dvfs") for r in results.values()) else "")
    md = (f"# {problem.name}: heuristic vs exact\n\n"
          f"`pipeplan compare {problem.name} --solvers {','.join(names)} --time-limit {time_limit:g}{options}`\n\n"
          + results_markdown(rows, has_power=problem.profile.has_power)
          + "\nbound and gap: against the best certified lower bound of this run (a proven optimum, or an exact "
            "solver's bound), the same for every solver; `-` when no exact solver proved one.\n" + dvfs_note
          + f"\nExact (period, latency) front: {exact_note}.\n"
          + "".join(f"Hypervolume of the {label(n, results[n])} front / exact front: {v:.4f} "
                    f"(reference point {hv['ref']}).\n" for n, v in hv["ratios"].items()))
    write_atomic(out / "compare.csv", csv_text(rows, COLUMNS))
    write_atomic(out / "compare.md", md)
    write_json(out / "results.json", {n: r.to_dict() for n, r in results.items()})
    write_json(out / "hypervolume.json", hv)
    write_atomic(out / "front_period_latency.csv", front_csv(exact["points"], "period", "latency"))
    pareto_plot(out / "pareto.png", f"{problem.name}: period vs latency", "period_ms", "latency_ms",
                exact=exact["points"], approx={label(n, results[n]): f for n, f in approx.items()}, points=points)
    return md, results


def label(name: str, result: SolveResult) -> str:
    """A solver's name in tables and plots: ``nsga2 (dvfs)`` when it chose DVFS levels."""
    return name + (" (dvfs)" if result.params.get("dvfs") else "")


def front_note(front: dict) -> str:
    """``6 points, all proven`` / ``3 points, 1 proven; sweep stopped by its time limit: partial``."""
    points = front["points"]
    proven = sum(bool(p.get("proven")) for p in points)
    note = f"{len(points)} points, " + ("all proven" if proven == len(points) else f"{proven} proven")
    return note + ("" if front["complete"] else "; sweep stopped by its time limit: partial")


def hv_ratios(problem, exact_points: list[dict], approx: dict[str, list[dict]]) -> dict:
    """Hypervolume ratio of each approximate (period, latency) front to the exact one, against
    the instance's fixed reference point."""
    from pipeplan.formulations.mapping.pareto import hv_ratio, reference_point
    from pipeplan.solvers.mapping.warm_start import reference_plans

    ref = reference_point(problem, ("period", "latency"), reference_plans(problem))
    exact = [(p["objectives"]["period_ms"], p["objectives"]["latency_ms"]) for p in exact_points]
    ratios = {n: hv_ratio([(p["period_ms"], p["latency_ms"]) for p in front], exact, ref)
              for n, front in approx.items()}
    return {"ref": [round(v, 6) for v in ref], "ratios": ratios}


def pareto(problem, x: str, y: str, out: Path, *, time_limit: float, threads: int, seed: int, progress=None,
           solver: str = "exact", dvfs: bool = False) -> dict:
    """The (x, y) front into ``out`` (CSV, JSON, PNG). ``solver="exact"``: the epsilon-constraint
    sweep, points proven where marked; ``"nsga2"``: NSGA-II's front, for operator graphs where the
    sweep is too slow, every point ``proven=False`` (a heuristic proves nothing); with ``dvfs``
    NSGA-II chooses every unit's DVFS level too (the front's plans carry them)."""
    from pipeplan.solvers.mapping.exact_front import exact_front

    stem = f"front_{x}_{y}"
    if solver == "nsga2":
        if progress:
            progress(0, 1, "NSGA-II")
        r = pipeplan.solve(problem, "nsga2", time_limit=time_limit, seed=seed, objectives=(x, y), dvfs=dvfs)
        if r.termination.value == "error" or not r.front:
            raise SolverFailure(f"{problem.name}: NSGA-II {x}/{y} front", r.message or "no front")
        points = sorted(({**p, "proven": False} for p in r.front), key=lambda p: p["objectives"][AXES[x]])
        front = {"axes": [x, y], "solver": "nsga2", "dvfs": dvfs, "points": points,
                 "complete": r.termination.value == "completed", "wall_time_s": r.wall_time_s}
        if progress:
            progress(1, 1, f"{len(points)} points")
        write_atomic(out / f"{stem}.csv", front_csv(front["points"], x, y))
        write_json(out / f"{stem}.json", front)
        title = f"{problem.name}: NSGA-II front (not proven{', DVFS levels' if dvfs else ''}), {x} vs {y}"
        pareto_plot(out / f"{stem}.png", title, AXES[x], AXES[y], approx={"NSGA-II": [p["objectives"] for p in points]})
        return front
    try:
        front = exact_front(problem, x, y, time_limit=time_limit, threads=threads, seed=seed, progress=progress)
    except Exception as exc:
        raise SolverFailure(f"{problem.name}: exact {x}/{y} front", f"{type(exc).__name__}: {exc}") from None
    front["solver"] = "exact"
    write_atomic(out / f"{stem}.csv", front_csv(front["points"], x, y))
    write_json(out / f"{stem}.json", front)
    title = "exact" if front["complete"] and all(p.get("proven") for p in front["points"]) else "partial exact"
    pareto_plot(out / f"{stem}.png", f"{problem.name}: {title} {x} vs {y} front ({front_note(front)})", AXES[x], AXES[y],
                exact=front["points"])
    return front


STUDY_INSTANCES = ["khadas-vim3/Alex", "khadas-vim3/Google", "khadas-vim3/Google-parapipe",
                   "khadas-vim3/MobileV1", "khadas-vim3/ResV1_50", "khadas-vim3/SqueezeV1", "khadas-vim3/YOLOv3",
                   "khadas-vim3/InceptionV3", "khadas-vim3/InceptionV4", "khadas-vim3/InceptionResnetV2",
                   "a311d/inception_v1", "a311d/inception_v2", "a311d/resnet50", "a311d/squeezenet"]


STUDY_NOTES = """
## Notes

- A hypervolume ratio above 1 means the exact sweep stopped at its time limit before reaching
  the end of the front (every listed exact point is still proven): NSGA-II then covers more.
- Two energies per inference: per frame (`energy_mj`: board power x time over one frame's
  phases, as the Khadas `total_e` is measured) and steady state (`energy_ss_mj`: a running
  pipeline's draw, the static board power paid once per period). Per frame, a pipelined plan
  pays its transfers and runs blocks on more power-hungry PUs and nothing credits its shorter
  period, so the throughput-optimal plans are less efficient than non-pipelined ones (the
  measured pipelined GoogLeNet used 539 mJ per frame against 424 mJ all on the GPU); in steady
  state they are more efficient, the sign Para-Pipe reports (+11.0% / +23.3%). Details and the
  board's own runs: energy_efficiency.md.
- With disjoint PUs the hierarchical optimum of a block chain has the best contiguous
  pipeline's period (no branches to run in parallel); Para-Pipe's plans reuse a PU in two
  stages, which energy_efficiency.md compares too.
"""


def study(out: Path, *, names: list[str], instances: list[str], time_limit: float, threads: int, seed: int,
          command: str, progress=None) -> str:
    """Every study instance: compare table + plot, exact (period, latency) and (period, energy)
    fronts; energy efficiency of every instance (energy_efficiency.md, .csv); a summary
    README.md in ``out``."""
    import platform

    from pipeplan.instances.catalog import load_mapping

    summary = []
    for i, inst in enumerate(instances):
        if progress:
            progress(i, len(instances), inst)
        problem = load_mapping(inst)
        folder = out / slug(inst)
        _, results = compare(problem, names, folder, time_limit=time_limit, threads=threads, seed=seed)
        front_e = pareto(problem, "period", "energy", folder, time_limit=time_limit, threads=threads, seed=seed)
        exact = results.get("cpsat")
        best = exact.objectives.get("period_ms") if exact and exact.objectives else None
        row = {"instance": inst, "units": len(problem.units), "pus": len(problem.pu_names),
               "cpsat_status": exact.termination.value if exact else "-",
               "cpsat_time_s": exact.wall_time_s if exact else None, "cpsat_gap": exact.gap if exact else None,
               "period_opt_ms": best, "energy_front_points": len(front_e["points"])}
        for n, r in results.items():
            p = r.objectives.get("period_ms")
            row[f"{n}_ratio"] = p / best if p and best else None
        hv = json.loads((folder / "hypervolume.json").read_text())["ratios"]
        row["nsga2_hv_ratio"] = hv.get("nsga2")
        row["nsga2_time_s"] = results["nsga2"].wall_time_s if "nsga2" in results else None
        summary.append(row)
    effs = energy_efficiency(instances, out, time_limit=time_limit, threads=threads, seed=seed, command=command,
                             staged=False)      # ``out`` is this command's stage (cli's staged_folder)
    lines = ["# Operator mapping: heuristic vs exact, Pareto fronts, energy efficiency", "",
             f"Made by `{command}` on {platform.machine()} ({platform.python_version()}, {threads} thread(s) "
             f"per solver, {time_limit:g} s limit per solve). One folder per instance: compare.md/csv, "
             "pareto.png (exact period-latency front, NSGA-II front, heuristic points), exact fronts as "
             "CSV/JSON/PNG.", "",
             "## Period of each solver relative to the CP-SAT plan (1.00 = same period)", ""]
    lines += markdown_table(
        ("instance", "units", "PUs", "CP-SAT status", "CP-SAT time (s)", "gap", "period (ms)", *names,
         "NSGA-II HV / exact", "NSGA-II time (s)"),
        ([r["instance"], r["units"], r["pus"], r["cpsat_status"], cell(r["cpsat_time_s"], ".1f"),
          "-" if r["cpsat_gap"] is None else f"{100 * r['cpsat_gap']:.2f}%", cell(r["period_opt_ms"]),
          *(cell(r.get(f"{n}_ratio"), ".3f") for n in names), cell(r["nsga2_hv_ratio"], ".4f"),
          cell(r["nsga2_time_s"], ".1f")] for r in summary))
    lines += ["", "## Energy efficiency (inferences per joule) of throughput-optimal plans", "",
              "Gain of the throughput-optimal hierarchical plan over the best pure pipeline and the best "
              "non-pipelined parallel plan, per frame and in steady state; the plans, the board's own runs and why "
              "the signs differ: energy_efficiency.md.", "", PAPER_NOTE, ""]
    lines += gains_lines(effs)
    md = "\n".join(lines) + "\n" + STUDY_NOTES
    write_atomic(out / "README.md", md)
    write_atomic(out / "summary.csv", csv_text(summary, columns=list(summary[0])))
    return md
