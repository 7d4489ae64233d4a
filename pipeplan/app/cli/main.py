"""The ``pipeplan`` command line.

Every command validates its input first; bad input prints one line ``error: FILE: FIELD:
what is wrong`` to stderr and exits with status 2, without a traceback and without writing
any output file.
"""
from __future__ import annotations

import errno
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Optional

import typer

from pipeplan.app.cli.common import Group, command_text, fail_if_all_failed, listed, name_list, refuse_twice
from pipeplan.app.cli.common import progress as _progress
from pipeplan.app.cli.gradcode import app as gradcode_app
from pipeplan.app.cli.instance import instance_cmd
from pipeplan.app.cli.multi import multi_app
from pipeplan.app.cli.rollout import rollout_app
from pipeplan.core.api import check_limits
from pipeplan.core.deadline import MODEL_RUN_LIMIT_S, check_stop, stop, stop_status, watch_signals
from pipeplan.core.errors import InputError, SolverFailure, Terminated, single_line
from pipeplan.core.io import check_out_folder, check_output, staged_folder
from pipeplan.core.sizes import WORKER_PROCESS_BYTES, check_memory
from pipeplan.core.vocabulary import MAPPING_AXES, MAPPING_KEYS, SYSTEMS

app = typer.Typer(cls=Group, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="pipeplan: plan pipelined ML work (operator mapping, gradient coding, rollout admission).")
app.add_typer(gradcode_app, name="gradcode")
app.add_typer(rollout_app, name="rollout")
app.add_typer(multi_app, name="multi")
app.command("instance")(instance_cmd)


def _print_version(value: bool) -> None:
    if value:
        import pipeplan
        typer.echo(f"pipeplan {pipeplan.__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                       help="print the version and exit")):
    """pipeplan: plan pipelined ML work (operator mapping, gradient coding, rollout admission)."""


# help shared by several commands ({...}: filled in from the registry when help is shown)
INSTANCE_HELP = (f"mapping instance: {listed('mapping instances')}; or an instance JSON file "
                 "(your own model: `pipeplan instance MODEL --out FILE`)")
SOLVERS_HELP = f"comma list of mapping solvers: {listed('mapping solvers')}"
SEED_HELP = "seed of the solvers' random choices (same seed, same result)"
THREADS_HELP = "threads of each exact solver (CP-SAT, MILP); the heuristics use one"
AXES_HELP = ", ".join(MAPPING_AXES)
ENERGY_HELP = "energy: per frame, as the board measures it; energy_ss: steady state of the running pipeline"
DVFS_HELP = "also choose each unit's DVFS level (solvers that search levels: nsga2); otherwise every PU runs at its top level"
BOUND_KEYS = ", ".join(MAPPING_KEYS.values())
PARETO_SOLVERS = ("exact", "nsga2")


def _emit(obj) -> None:
    typer.echo(json.dumps(obj, indent=2))


@app.command("instances")
def instances_cmd(system: Optional[str] = typer.Option(None, "--system", help=f"only this system: {', '.join(SYSTEMS)}")):
    """List the named instances of every system. Operator-level mapping instances are listed
    by their default name, the fused graph; NAME@raw (one unit per ONNX operator) and
    NAME@modules (one block per module) are the other granularities of each."""
    from pipeplan.app.bench import catalogue
    from pipeplan.core.vocabulary import SYSTEMS
    from pipeplan.instances.catalog import measured_names

    if system is not None and system not in SYSTEMS:
        raise InputError("--system", "", f"unknown system {system!r} ({', '.join(SYSTEMS)})")
    measured = set(measured_names())
    for sys_name in [system] if system else SYSTEMS:
        names, _ = catalogue(sys_name)
        for name in names():
            what = ("block-level, measured (Khadas VIM3)" if name in measured
                    else "operator-level, roofline estimate, fused (also @raw, @modules)" if sys_name == "mapping"
                    else _multi_line(name) if sys_name == "multi"
                    else sys_name)
            if name.startswith("host/"):    # several times off on a real CPU: point to the measured way
                what += "; measured instead: pipeplan instance " + name.split("/", 1)[1] + " --out my.json"
            typer.echo(f"{name:40s} {what}")


def _multi_line(name: str) -> str:
    """What a multi-network instance holds: its networks and how they share the PUs."""
    from pipeplan.instances.multi import load_multi
    problem = load_multi(name)
    nets = " + ".join(f"{n.name}={n.problem.name}" for n in problem.networks)
    return f"{len(problem.networks)} networks on one SoC, {problem.sharing.replace('_', '-')} PUs: {nets}"


@app.command("solvers")
def solvers_cmd(params: bool = typer.Option(False, "--params", help="also list each solver's parameters "
                                                                    "(name=default, allowed values)")):
    """List the registered solvers and whether they are available here."""
    from pipeplan.core.registry import COMMON, solvers
    for s in solvers():
        ok, why = s.available()
        kind = "exact" if s.exact else "heuristic"
        typer.echo(f"{s.kind:10s} {s.name:14s} {kind:9s} {'available' if ok else 'unavailable: ' + why:12s}  {s.description}")
        if params:
            common = [c for c in COMMON if c in s.params]
            own = [p.describe() for p in s.own_params().values()]
            typer.echo(f"{'':25s}takes: {', '.join(common) or '-'}; parameters: {', '.join(own) or 'none'}")


def _check_objective(objective: str) -> None:
    if objective not in MAPPING_AXES:
        raise InputError("--objective", "", f"unknown objective {objective!r} ({AXES_HELP})")


def _dvfs_params(names: list[str]) -> dict[str, dict]:
    """solver -> ``{"dvfs": True}`` for each of ``names`` that searches DVFS levels; a one-line
    error when none does (the others run at the top levels, as without ``--dvfs``)."""
    from pipeplan.core.registry import get_solver, solvers
    taking = {n: {"dvfs": True} for n in names if "dvfs" in get_solver("mapping", n).params}
    if not taking:
        able = ", ".join(s.name for s in solvers("mapping") if "dvfs" in s.params)
        which = f"solver {names[0]} does not search" if len(names) == 1 else f"none of {', '.join(names)} searches"
        raise InputError("--dvfs", "", f"{which} DVFS levels (solvers that do: {able})")
    return taking


def _energies(objectives: dict, has_power: bool) -> str:
    """``energy/frame 579.6 mJ, steady-state 301.2 mJ`` (``n/a`` without power figures)."""
    if not has_power:
        return "energy n/a"
    return (f"energy/frame {objectives.get('energy_mj', float('nan')):.1f} mJ, "
            f"steady-state {objectives.get('energy_ss_mj', float('nan')):.1f} mJ")


def _parse_bounds(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in MAPPING_KEYS.values():
            raise InputError("--bound", "", f"expected {', '.join(k + '=X' for k in MAPPING_KEYS.values())}, "
                                            f"got {item!r}")
        try:
            out[key] = float(value)
        except ValueError:
            raise InputError("--bound", key, f"not a number: {value!r}") from None
        if not 0 < out[key] < float("inf"):
            raise InputError("--bound", key, f"must be a positive finite number, got {value!r}")
    return out


@app.command("solve")
def solve_cmd(instance: str = typer.Argument(..., help=INSTANCE_HELP),
              solver: str = typer.Option(..., "--solver", help=f"mapping solver: {listed('mapping solvers')} "
                                                              "(parameters: `pipeplan solvers --params`)"),
              time_limit: Optional[float] = typer.Option(None, "--time-limit", help="seconds"),
              seed: int = typer.Option(0, "--seed", help=SEED_HELP),
              threads: int = typer.Option(1, "--threads", help=THREADS_HELP),
              objective: str = typer.Option("period", "--objective",
                                            help=f"objective to minimise: {AXES_HELP} ({ENERGY_HELP})"),
              dvfs: bool = typer.Option(False, "--dvfs", help=DVFS_HELP),
              bound: list[str] = typer.Option([], "--bound", help="epsilon bound (exact solvers; repeatable), KEY=X "
                                              f"with KEY one of {BOUND_KEYS}, e.g. latency_ms=120"),
              pus: Optional[str] = typer.Option(None, "--pus", help="use only these PUs, e.g. B,G"),
              shared_pus: bool = typer.Option(False, "--shared-pus", help="a PU may serve several stages (cpsat)"),
              out: Optional[Path] = typer.Option(None, "--out", help="write the SolveResult JSON here")):
    """Solve a mapping instance and print (or write) the SolveResult."""
    import pipeplan
    from pipeplan.core.io import write_atomic
    from pipeplan.core.registry import get_solver
    from pipeplan.formulations.mapping.problem import restrict_pus
    from pipeplan.instances.catalog import load_mapping

    _check_objective(objective)
    info = get_solver("mapping", solver)  # unknown names fail before any work
    extra = _dvfs_params([solver])[solver] if dvfs else {}
    bounds = _parse_bounds(bound)
    if bounds and not info.exact:
        raise InputError("--bound", "", f"solver {solver} is a heuristic and takes no bounds (use cpsat or milp)")
    problem = load_mapping(instance)
    if pus:
        problem = restrict_pus(problem, tuple(name_list("--pus", pus)))
    if bounds:
        extra["bounds"] = bounds
    if shared_pus:
        extra["shared_pus"] = True
    result = pipeplan.solve(problem, solver, time_limit=time_limit, seed=seed, threads=threads,
                            objective=objective, **extra)
    if result.termination.value == "infeasible":
        raise InputError(instance, "bounds" if bounds else "instance", f"infeasible: {result.message}")
    text = result.to_json()
    if out:
        write_atomic(out, text)
        o = result.objectives
        key = MAPPING_KEYS[objective]
        gap = ""
        if info.exact and result.quality.value != "proven_optimal" and result.gap is not None:
            gap = f", gap {result.gap:.1%} to the certified bound ({result.bound_source.get(key, 'bound')})"
        typer.echo(f"{result.solver}: {result.termination.value}/{result.quality.value} period "
                   f"{o.get('period_ms', float('nan')):.2f} ms, latency {o.get('latency_ms', float('nan')):.2f} ms, "
                   f"{_energies(o, problem.profile.has_power)}{gap} -> {out}")
    else:
        typer.echo(text, nl=False)
    if result.termination.value == "error":
        raise typer.Exit(1)


def _solver_list(text: str, objective: str = "period") -> list[str]:
    """The mapping solvers of a comma list, each able to minimise ``objective``."""
    from pipeplan.core.registry import get_solver
    names = name_list("--solvers", text)
    for n in names:
        choices = get_solver("mapping", n).params["objective"].choices
        if choices and objective not in choices:
            raise InputError("--objective", "", f"solver {n} minimises only {', '.join(choices)}, not {objective} "
                                                "(leave it out of --solvers)")
    return names


@app.command("compare")
def compare_cmd(instance: str = typer.Argument(..., help=INSTANCE_HELP),
                solvers: str = typer.Option("single,heft,pipeline-dp,nsga2,cpsat,milp", "--solvers", help=SOLVERS_HELP),
                time_limit: float = typer.Option(30.0, "--time-limit", help="seconds per solver"),
                threads: int = typer.Option(2, "--threads", help=THREADS_HELP),
                seed: int = typer.Option(0, "--seed", help=SEED_HELP),
                objective: str = typer.Option("period", "--objective",
                                              help=f"objective every solver minimises: {AXES_HELP} ({ENERGY_HELP})"),
                dvfs: bool = typer.Option(False, "--dvfs", help=DVFS_HELP + " (the other solvers run at the top levels)"),
                out: Optional[Path] = typer.Option(None, "--out", help="folder (default results/compare/<instance>)")):
    """Run several solvers on one instance: table (period, latency, energy per frame and steady
    state, gap, time, status) + Pareto plot."""
    from pipeplan.app.studies.mapping import compare, slug
    from pipeplan.instances.catalog import load_mapping

    check_limits(time_limit, threads, seed=seed)
    _check_objective(objective)
    names = _solver_list(solvers, objective)
    params = _dvfs_params(names) if dvfs else {}
    problem = load_mapping(instance)
    folder = out or Path("results") / "compare" / slug(problem.name)
    with staged_folder(folder) as stage, _progress(f"compare {problem.name}") as progress:
        md, results = compare(problem, names, stage, time_limit=time_limit, threads=threads, seed=seed,
                              progress=progress, objective=objective, params=params)
    typer.echo(md + f"\nwritten: {folder}/compare.md, compare.csv, pareto.png")
    fail_if_all_failed(f"{problem.name}: compare", results)


@app.command("pareto")
def pareto_cmd(instance: str = typer.Argument(..., help=INSTANCE_HELP),
               x: str = typer.Option("period", "--x", help=f"objective on the x axis: {AXES_HELP} ({ENERGY_HELP})"),
               y: str = typer.Option("latency", "--y", help=f"objective on the y axis: {AXES_HELP} (other than --x)"),
               solver: str = typer.Option("exact", "--solver", help="exact (epsilon-constraint sweep over CP-SAT, "
                                          "points proven) or nsga2 (NSGA-II front, for operator graphs too large "
                                          "for the sweep; not proven)"),
               time_limit: float = typer.Option(60.0, "--time-limit", help="seconds for the whole sweep (or NSGA-II run)"),
               threads: int = typer.Option(2, "--threads", help="threads of CP-SAT in the exact sweep (NSGA-II uses one)"),
               seed: int = typer.Option(0, "--seed", help=SEED_HELP),
               dvfs: bool = typer.Option(False, "--dvfs", help="NSGA-II also chooses each unit's DVFS level "
                                                               "(with --solver nsga2)"),
               out: Optional[Path] = typer.Option(None, "--out", help="folder (default results/pareto/<instance>)")):
    """Pareto front of two objectives (CSV + PNG): exact by an epsilon-constraint sweep, or NSGA-II's."""
    from pipeplan.app.studies.mapping import pareto, slug
    from pipeplan.instances.catalog import load_mapping

    for name, v in (("--x", x), ("--y", y)):
        if v not in MAPPING_AXES:
            raise InputError(name, "", f"unknown objective {v!r} ({AXES_HELP})")
    if x == y:
        raise InputError("--y", "", "must differ from --x")
    if solver not in PARETO_SOLVERS:
        raise InputError("--solver", "", f"unknown front solver {solver!r} ({', '.join(PARETO_SOLVERS)})")
    if dvfs and solver != "nsga2":
        raise InputError("--dvfs", "", f"the {solver} front does not search DVFS levels (use --solver nsga2)")
    check_limits(time_limit, threads, seed=seed)
    problem = load_mapping(instance)
    folder = out or Path("results") / "pareto" / slug(problem.name)
    with staged_folder(folder) as stage, _progress(f"pareto {problem.name}") as progress:
        front = pareto(problem, x, y, stage, time_limit=time_limit, threads=threads, seed=seed, progress=progress,
                       solver=solver, dvfs=dvfs)
    kx, ky = MAPPING_KEYS[x], MAPPING_KEYS[y]
    for p in front["points"]:
        typer.echo(f"{kx}={p['objectives'][kx]:.3f}  {ky}={p['objectives'][ky]:.3f}  proven={p['proven']}")
    state = "complete" if front["complete"] else "partial (time limit)"
    if solver == "nsga2":
        state = "NSGA-II front (not proven), " + ("all generations run" if front["complete"] else "stopped by the time limit")
    typer.echo(f"{len(front['points'])} points, {state} -> {folder}/front_{x}_{y}.csv, .png")


@app.command("study")
def study_cmd(out: Path = typer.Option(Path("results/mapping"), "--out", help="folder of the study's tables and figures"),
              solvers: str = typer.Option("single,heft,pipeline-dp,nsga2,cpsat,milp", "--solvers", help=SOLVERS_HELP),
              time_limit: float = typer.Option(60.0, "--time-limit", help="seconds per solver run"),
              threads: int = typer.Option(2, "--threads", help=THREADS_HELP),
              seed: int = typer.Option(0, "--seed", help=SEED_HELP),
              instances: Optional[str] = typer.Option(None, "--instances", help="comma list (default: the study set)")):
    """The mapping study committed under results/mapping/ (tables, fronts, energy efficiency)."""
    from pipeplan.app.studies.mapping import STUDY_INSTANCES, study
    from pipeplan.instances.catalog import load_mapping

    check_limits(time_limit, threads, seed=seed)
    names = _solver_list(solvers)
    chosen = name_list("--instances", instances) if instances is not None else STUDY_INSTANCES
    for inst in chosen:
        load_mapping(inst)
    command = command_text("pipeplan study")
    with staged_folder(out) as stage, _progress("study") as progress:
        md = study(stage, names=names, instances=chosen, time_limit=time_limit, threads=threads, seed=seed,
                   command=command.strip(), progress=progress)
    typer.echo(md)


@app.command("energy-efficiency")
def energy_efficiency_cmd(out: Path = typer.Option(Path("results/mapping"), "--out",
                                                   help="folder of energy_efficiency.md, .csv and _plans.csv"),
                          instances: Optional[str] = typer.Option(None, "--instances",
                                                                  help="comma list (default: the Para-Pipe GoogLeNet "
                                                                       "and Inception block instances)"),
                          time_limit: float = typer.Option(60.0, "--time-limit", help="seconds per CP-SAT solve"),
                          threads: int = typer.Option(2, "--threads", help=THREADS_HELP),
                          seed: int = typer.Option(0, "--seed", help=SEED_HELP)):
    """Para-Pipe's comparison: energy efficiency of the throughput-optimal hierarchical plan against
    pure pipelining and non-pipelined parallel execution, per frame and in steady state."""
    from pipeplan.app.studies.energy_efficiency import INSTANCES, PAPER_NOTE, energy_efficiency, gains_lines
    from pipeplan.instances.catalog import load_mapping

    check_limits(time_limit, threads, seed=seed)
    chosen = name_list("--instances", instances) if instances is not None else INSTANCES
    for inst in chosen:
        load_mapping(inst)
    check_out_folder(out)
    for file in ("energy_efficiency.md", "energy_efficiency.csv", "energy_efficiency_plans.csv"):
        check_output(out / file)
    command = command_text("pipeplan energy-efficiency")
    with _progress("energy-efficiency") as progress:
        table = energy_efficiency(chosen, out, time_limit=time_limit, threads=threads, seed=seed,
                                  command=command.strip(), progress=progress)
    typer.echo("\n".join([PAPER_NOTE, "", *gains_lines(table), "",
                          f"written: {out}/energy_efficiency.md, energy_efficiency.csv, energy_efficiency_plans.csv"]))


@app.command("optima")
def optima_cmd(instances: str = typer.Option("a311d/*,bst/*", "--instances",
                                             help="comma list of instance names or shell-style patterns over the "
                                                  "catalogue, granularities included (a311d/*@raw)"),
               objective: str = typer.Option("period", "--objective", help=f"one of {', '.join(MAPPING_AXES)}"),
               time_limit: float = typer.Option(60.0, "--time-limit", help="seconds per instance"),
               threads: int = typer.Option(2, "--threads", help=THREADS_HELP),
               heuristics: bool = typer.Option(True, "--heuristics/--no-heuristics",
                                               help="also run every heuristic and compare it with the optimum"),
               out: Path = typer.Option(Path("results/mapping"), "--out", help="folder of optima.csv and optima.md")):
    """Prove (or bound) the optimum of catalogue instances and store it in optima.csv."""
    import fnmatch

    from pipeplan.app.studies.optima import FILES as OPTIMA_FILES
    from pipeplan.app.studies.optima import run_optima
    from pipeplan.instances.catalog import load_mapping, mapping_instance_names, operator_granularity_names

    check_limits(time_limit, threads)
    _check_objective(objective)
    known = list(dict.fromkeys(mapping_instance_names() + operator_granularity_names()))
    names: list[str] = []
    for item in (s.strip() for s in instances.split(",") if s.strip()):
        pool = known if "@" in item else [n for n in known if "@" not in n]   # a311d/* is the fused graphs
        matched = [n for n in pool if fnmatch.fnmatchcase(n, item)] if any(c in item for c in "*?[") else [item]
        if not matched:
            raise InputError("--instances", item, "matches no catalogue instance (see `pipeplan instances`)")
        names += [n for n in matched if n not in names]
    for name in names:
        load_mapping(name)
    check_out_folder(out, writes=OPTIMA_FILES)
    with _progress("optima") as progress:
        rows = run_optima(names, out, objective=objective, time_limit=time_limit, threads=threads,
                          heuristics=heuristics, progress=progress)
    for r in rows:
        gap = "" if r["gap"] is None else f", gap {r['gap']:.2%}"
        typer.echo(f"{r['instance']}: {r['status']} {r['value']:.4f} (bound {r['bound']:.4f}, {r['bound_source']}{gap}) "
                   f"in {r['seconds']:.1f} s")


@app.command("evaluate")
def evaluate_cmd(instance: str = typer.Argument(..., help=INSTANCE_HELP),
                 mapping: Optional[str] = typer.Option(None, "--mapping", help="one PU letter per unit, e.g. GGGGBBBBBBG"),
                 plan: Optional[Path] = typer.Option(None, "--plan", help="a plan or SolveResult JSON file"),
                 batch: Optional[Path] = typer.Option(None, "--batch", help="CSV with columns mapping, mode, freq"),
                 mode: str = typer.Option("pipelined", "--mode", help="pipelined or serial"),
                 freq: str = typer.Option("max", "--freq", help="max, min, or one level per unit: L1,L2,..."),
                 detail: bool = typer.Option(False, "--detail", help="also print unit start/finish times")):
    """Score a mapping with the cost model: period, latency, energy per frame (energy_mj) and
    steady-state energy per inference (energy_ss_mj)."""
    from pipeplan.formulations.mapping.scoring import evaluate_batch, evaluate_one
    from pipeplan.instances.catalog import load_mapping

    given = [x is not None for x in (mapping, plan, batch)]
    if sum(given) != 1:
        raise InputError("evaluate", "", "give exactly one of --mapping, --plan, --batch")
    if mode not in ("pipelined", "serial"):
        raise InputError("--mode", "", f"must be pipelined or serial, got {mode!r}")
    problem = load_mapping(instance)
    if batch is not None:
        for line in evaluate_batch(problem, batch):
            typer.echo(json.dumps(line))
        return
    _emit(evaluate_one(problem, mapping=mapping, plan_file=plan, mode=mode, freq=freq, detail=detail))


@app.command("profile")
def profile_cmd(model: str = typer.Argument(..., help="ONNX file, or a model of the onnx wheel (e.g. squeezenet)"),
                out: Optional[Path] = typer.Option(None, "--out", help="profile JSON to write"),
                runs: int = typer.Option(10, "--runs", min=1, help="timed runs (each node's median is kept)"),
                warmup: int = typer.Option(3, "--warmup", min=0, help="untimed runs before them"),
                pus: str = typer.Option("C0,C1", "--pus", help="names of the identical host PUs"),
                time_limit: float = typer.Option(MODEL_RUN_LIMIT_S, "--time-limit",
                                                 help="seconds the profiling runs may take; ONNX Runtime is stopped there")):
    """Measure the host with ONNX Runtime per-node profiling (median per node)."""
    from pipeplan.core.io import check_output, read_input, write_json
    from pipeplan.formulations.mapping.onnx_graph import model_path
    from pipeplan.formulations.mapping.profile import pu_name_fault
    from pipeplan.profiles.ort_profiler import profile_host

    check_limits(time_limit)
    names = tuple(name_list("--pus", pus))
    fault = next((f for f in map(pu_name_fault, names) if f), None)
    if fault:
        raise InputError("--pus", "", fault)
    path = model_path(model)
    if out:   # refuse a bad output before minutes of profiling, and before any progress line
        read_input(path, what="ONNX model")
        check_output(out)
    with _progress(f"profiling {path.name}") as progress:
        prof = profile_host(path, pus=names, runs=runs, warmup=warmup, progress=progress, time_limit_s=time_limit)
    doc = prof.to_dict()
    if out:
        write_json(out, doc)
        total = sum(t for t in doc["time_ms"][names[0]][prof.pus[names[0]].max_level] if t)
        typer.echo(f"{len(prof.units)} units, {total:.2f} ms per inference on one host PU -> {out}")
    else:
        _emit(doc)


@app.command("import-khadas")
def import_khadas_cmd(src: Path = typer.Option(Path("../shared/data/khadas-vim3"), "--src",
                                               help="folder of the raw Khadas VIM3 measurements (layers_dvfs.csv, ...)"),
                      repo: Path = typer.Option(Path("."), "--repo", help="repository root to write profiles/ and instances/ in")):
    """Derive profiles/, instances/ files from the raw Khadas VIM3 measurements (run once)."""
    from pipeplan.profiles.khadas_import import import_khadas
    if not (src / "layers_dvfs.csv").exists():
        raise InputError(str(src), "layers_dvfs.csv", "missing (point --src at the khadas-vim3 data folder)")
    for p in import_khadas(src, repo):
        typer.echo(str(p))


@app.command("costmodel")
def costmodel_cmd(out: Path = typer.Option(Path("results/costmodel"), "--out",
                                           help="folder of the report (README.md, runs.csv, plots)")):
    """The cost model against every measured Khadas VIM3 run: parameters, cross-validated errors,
    contention, and the runs it cannot express (from the committed files; a few seconds)."""
    from pipeplan.app.studies.costmodel import write
    with staged_folder(out) as stage:      # all files appear together, or none (a bad README.md: none)
        written = write(stage)
    for p in written:
        typer.echo(str(out / p.relative_to(stage)))


@app.command("bench")
def bench_cmd(suite: str = typer.Option("quick", "--suite", help=f"suite name ({listed('bench suites')}) or TOML file"),
              engine: str = typer.Option("local", "--engine", help="local processes or ray"),
              jobs: int = typer.Option(1, "--jobs", min=1, help="runs at once (each uses one thread)"),
              time_limit: Optional[float] = typer.Option(None, "--time-limit",
                                                         help="seconds per run (default: the suite's)"),
              out: Optional[Path] = typer.Option(None, "--out", help="results folder (default results/<suite>)"),
              fresh: bool = typer.Option(False, "--fresh", help="forget the runs already recorded in the folder")):
    """Run a suite (instances x solvers x seeds of every system), then write its report.
    Finished runs are appended to runs.jsonl; a rerun skips them (unless --fresh)."""
    from pipeplan.app.bench import load_suite, plan_runs, run_suite
    from pipeplan.app.report import write_report

    if engine not in ("local", "ray"):
        raise InputError("--engine", "", f"unknown engine {engine!r} (local, ray)")
    check_limits(time_limit)
    check_memory("--jobs", jobs, WORKER_PROCESS_BYTES)
    suite_file, spec = load_suite(suite)
    plan_runs(spec, time_limit, str(suite_file))  # validate every group before creating any folder
    folder = out or Path("results") / Path(suite).stem
    with _progress(f"bench {suite}") as progress:
        counts = run_suite(suite, folder, time_limit=time_limit, jobs=jobs, engine=engine, progress=progress,
                           fresh=fresh)
    write_report(folder)
    typer.echo(f"{counts['runs']} runs ({counts['skipped']} already recorded, {counts['ran']} run now) in "
               f"{counts['wall_time_s']:.0f} s -> {folder}/runs.jsonl, report.md, summary.csv")


@app.command("limits")
def limits_cmd(out: Path = typer.Option(Path("results/limits.md"), "--out", help="the Markdown report"),
               systems: str = typer.Option("mapping,gradcode,rollout,multi", "--systems",
                                           help=f"comma list of: {listed('limits systems')}"),
               limits: str = typer.Option("3,30", "--limits", help="time limits to try (s), comma list")):
    """Benchmark the time-limit guarantee: whole-process wall time and peak memory of every
    solver on synthetic instances of growing size (one process per run)."""
    from pipeplan.app.limits import MAX_LIMIT_S, SIZES, measure, plan, report
    from pipeplan.core.io import check_output, write_atomic

    chosen = name_list("--systems", systems)
    unknown = [x for x in chosen if x not in SIZES]
    if unknown:
        raise InputError("--systems", "", f"unknown system {unknown[0]!r} ({', '.join(SIZES)})")
    try:
        seconds = tuple(float(x) for x in limits.split(",") if x.strip())
    except ValueError:
        raise InputError("--limits", "", f"not a comma list of seconds: {limits!r}") from None
    refuse_twice("--limits", list(seconds))
    if not seconds:
        raise InputError("--limits", "", f"no time limit given: {limits!r}")
    for limit in seconds:
        check_limits(limit, option="--limits")
        if limit > MAX_LIMIT_S:
            raise InputError("--limits", "", f"at most {MAX_LIMIT_S:,.0f} s a run, got {limit!r}")
    check_output(out)
    load = __import__("os").getloadavg()
    runs = []
    todo = plan(chosen, seconds)
    with _progress("limits") as progress:
        for i, (system, solver, size, limit) in enumerate(todo):
            progress(i, len(todo), f"{system} {solver} {size} @ {limit:g} s")
            runs.append(measure(system, solver, size, limit))
            r = runs[-1]
            typer.echo(f"{system:8s} {solver:14s} {size:>6} limit {limit:>4g} s: wall {r.wall_s:6.2f} s, "
                       f"{r.peak_rss_mb:6.0f} MB, {r.termination}{'' if r.ok else '  MISSES THE GOAL'}", err=True)
    write_atomic(out, report(runs, load=load))
    typer.echo(f"{sum(r.ok for r in runs)} of {len(runs)} runs meet the goal -> {out}")


@app.command("report")
def report_cmd(results_dir: Path = typer.Argument(..., help="a bench results folder")):
    """Summarise a bench folder: summary.csv and report.md with tables and plots."""
    from pipeplan.app.report import write_report
    write_report(results_dir)
    typer.echo(f"-> {results_dir}/report.md, summary.csv")


def _model_file(model: str) -> Path:
    """An ONNX file, or the name of a model shipped in the onnx wheel (e.g. inception_v1)."""
    from pipeplan.formulations.mapping.onnx_graph import LIGHT_MODELS, light_model_path
    return light_model_path(model) if model in LIGHT_MODELS and not Path(model).exists() else Path(model)


@app.command("export")
def export_cmd(plan: Path = typer.Argument(..., help="a plan or SolveResult JSON file"),
               model: str = typer.Option(..., "--model", help="ONNX file, or a model of the onnx wheel (inception_v1)"),
               out: Path = typer.Option(..., "--out", help="export folder (replaced if it holds an earlier export)"),
               instance: Optional[str] = typer.Option(None, "--instance", help="instance (default: the plan's; an instance file the plan names must lie in the plan's folder)"),
               platform: Optional[Path] = typer.Option(None, "--platform",
                                                       help="platform file (default: the instance's, else host.json)"),
               seed: int = typer.Option(0, "--seed", help="seed of the random weights of weightless models"),
               time_limit: float = typer.Option(MODEL_RUN_LIMIT_S, "--time-limit",
                                                help="seconds the batch-norm calibration of a weightless model "
                                                     "may run ONNX Runtime; it is stopped there")):
    """Cut a model along a plan: one ONNX sub-model per stage and branch group, plus manifest.json."""
    from pipeplan.deploy.export import export_plan
    check_limits(time_limit, seed=seed)      # else numpy's refusal of the seed is a traceback after the work
    doc = export_plan(plan, _model_file(model), out, instance=instance, platform_file=platform, seed=seed,
                      time_limit_s=time_limit)
    groups = sum(len(s["groups"]) for s in doc["stages"])
    p = doc["predicted"]
    typer.echo(f"{len(doc['stages'])} stages, {groups} sub-models; predicted period {p['period_ms']:.2f} ms, "
               f"latency {p['latency_ms']:.2f} ms -> {out}")


@app.command("run")
def run_cmd(folder: Path = typer.Argument(..., help="an export folder (pipeplan export, or pipeplan multi export)"),
            frames: int = typer.Option(200, "--frames", help="frames to stream through (at least 2)"),
            seed: int = typer.Option(0, "--seed", help="seed of the random input frames"),
            time_limit: float = typer.Option(MODEL_RUN_LIMIT_S, "--time-limit",
                                             help="seconds the run may take (each network's, for a joint export); "
                                                  "ONNX Runtime is stopped there"),
            as_json: bool = typer.Option(False, "--json", help="print the whole report as JSON")):
    """Run an export as a pipeline on ONNX Runtime: throughput, latency, PU busy share, output check.
    A joint export (joint.json) runs every network's pipeline at the same time."""
    from pipeplan.deploy.executor import platform_warning, run_export
    from pipeplan.deploy.multi import is_joint_export
    check_limits(time_limit, seed=seed)      # else numpy's refusal of a seed reads as a fault of the manifest
    if is_joint_export(folder):
        return _run_joint(folder, frames, seed, as_json, time_limit)
    with _progress(f"run {folder.name}") as progress:
        report = run_export(folder, frames=frames, seed=seed, progress=progress, time_limit_s=time_limit)
    warning = platform_warning(report)
    if warning:
        typer.echo(warning, err=True)
    if as_json:
        _emit(report)
    else:
        typer.echo(f"{report['frames']} frames: period {report['measured_period_ms']:.2f} ms measured / "
                   f"{report['predicted_period_ms']:.2f} ms predicted ({report['throughput_fps']:.1f} fps); "
                   f"latency median {report['latency_ms_median']:.2f} ms, p90 {report['latency_ms_p90']:.2f} ms / "
                   f"{report['predicted_latency_ms']:.2f} ms predicted")
        typer.echo(f"of the latency (median): service {report['service_ms_median']:.2f} ms computing in the "
                   f"stages, queueing {report['queueing_ms_median']:.2f} ms waiting between them; the measured "
                   "latency includes queueing, the predicted one does not")
        typer.echo("busy: " + ", ".join(f"{pu} {share:.0%}" for pu, share in report["pu_busy_share"].items())
                   + f"; outputs match the unsplit model: {'yes' if report['outputs_match'] else 'NO'}")
    if not report["outputs_match"]:
        raise typer.Exit(1)


def _run_joint(folder: Path, frames: int, seed: int, as_json: bool, time_limit: float) -> None:
    """`pipeplan run` of a joint export: one line per network, measured under concurrency vs predicted."""
    from pipeplan.deploy.executor import platform_warning
    from pipeplan.deploy.multi import run_joint
    with _progress(f"run {folder.name}") as progress:
        report = run_joint(folder, frames=frames, seed=seed, progress=progress, time_limit_s=time_limit)
    for net in report["networks"].values():
        warning = platform_warning(net["run"])
        if warning:
            typer.echo(warning, err=True)
    if as_json:
        _emit(report)
    else:
        for name, net in report["networks"].items():
            m, alone, joint = net["measured"], net["predicted"]["alone"], net["predicted"]["joint"]
            fps = "n/a" if m["concurrent_fps"] is None else f"{m['concurrent_fps']:.1f}"
            typer.echo(f"{name}: {fps} fps measured together ({m['concurrent_frames']} frames) / predicted "
                       f"{alone['fps']:.1f} alone, {joint['fair_fps']:.1f} fair, {joint['total_fps']:.1f} total, "
                       f"{joint['sustained_fps']:.1f} sustained; latency median {m['latency_ms_median']:.2f} ms / "
                       f"{alone['latency_ms']:.2f} ms alone, {joint['worst_latency_ms']:.2f} ms worst-case predicted; "
                       f"outputs match the unsplit model: {'yes' if net['outputs_match'] else 'NO'}")
    if not report["outputs_match"]:
        raise typer.Exit(1)


@app.command("deploy-loop")
def deploy_loop_cmd(models: str = typer.Option("inception_v1,resnet50", "--models", help="comma-separated ONNX files or models of the onnx wheel"),
                    out: Path = typer.Option(Path("results/deploy"), "--out", help="folder of deploy.md and deploy.csv"),
                    solvers: str = typer.Option("single,pipeline-dp,heft,cpsat", "--solvers", help=SOLVERS_HELP),
                    frames: int = typer.Option(200, "--frames", help="frames streamed through each export"),
                    runs: int = typer.Option(10, "--runs", help="profiling runs per model"),
                    cpsat_time_limit: float = typer.Option(30.0, "--cpsat-time-limit", help="seconds per exact solve"),
                    seed: int = typer.Option(0, "--seed", help="seed of the solvers, random weights and input frames")):
    """Profile the host, solve, export, run: predicted vs measured period and latency (CSV + markdown)."""
    from pipeplan.app.studies.deploy_loop import deploy_loop
    names = name_list("--models", models)
    command = command_text("pipeplan deploy-loop")
    with _progress("deploy-loop") as progress:
        md = deploy_loop(names, out, solvers=tuple(_solver_list(solvers)), frames=frames, runs=runs,
                         cpsat_time_limit=cpsat_time_limit, seed=seed, command=command, progress=progress)
    typer.echo(md + f"\nwritten: {out}/deploy.md, deploy.csv")


def _terminate_here(owner: int):
    """A SIGTERM handler that makes the signal an exception in process ``owner``, so that what a
    command has staged is cleaned up as for any failure (``core.io.staged_folder`` and
    ``write_atomic`` remove their temporary files on the way out, a bench kills the runs it
    started). By default SIGTERM ends Python at once and left the ``.pp-stage-*`` folder beside
    ``--out``. ``core.deadline.stop`` first kills the children ``run_within`` waits on, so that
    no thread waits out a MILP's time limit, and makes every later deadline check raise the
    exception again, should this one be dropped. A process forked from the command (those
    children, a bench run, a study's worker pool) inherits the handler but not the ownership: it
    dies as by default, so it never runs its parent's cleanup on a copy of the parent's stack."""
    def handler(signum, frame):
        if os.getpid() != owner:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        stop(128 + signum)
        raise Terminated(128 + signum)
    return handler


def _quiet_when_dropped(default):
    """An unraisable-exception hook that drops a :class:`Terminated` raised where Python cannot
    raise it (a ``__del__``) without the traceback it would print: the next deadline check
    raises it again (``core.deadline.stop``); every other such exception goes to ``default``."""
    def hook(unraisable):
        if not isinstance(unraisable.exc_value, Terminated):
            default(unraisable)
    return hook


def _exit_terminated(status: int) -> None:
    typer.echo("error: terminated by SIGTERM (nothing half-written is left)", err=True)
    sys.exit(status)


def main(argv: list[str] | None = None) -> None:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate_here(os.getpid()))
        sys.unraisablehook = _quiet_when_dropped(sys.unraisablehook)
        watch_signals()
    try:
        status = app(args=argv, standalone_mode=False)
        check_stop()       # a SIGTERM a library swallowed (matplotlib's draw) still ends as one
        if isinstance(status, int) and status:  # typer.Exit(n) comes back as a return value here
            if status == 130:       # typer's answer to Ctrl-C (KeyboardInterrupt), which had been silent
                typer.echo("aborted", err=True)
            sys.exit(status)
    except InputError as exc:
        typer.echo(f"error: {exc.one_line()}", err=True)
        sys.exit(2)
    except SolverFailure as exc:
        typer.echo(f"error: {exc.one_line()}", err=True)
        sys.exit(1)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except Terminated as exc:
        _exit_terminated(exc.code)
    except Exception as exc:
        if stop_status() is not None:   # what a SIGTERM raised inside a library became
            _exit_terminated(stop_status())
        if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:
            # a name no file system holds (a 300-byte instance, suite or trace name), wherever
            # pathlib first met it: the user's input, not a fault of the tool
            typer.echo(f"error: {InputError(str(exc.filename), '', 'name too long for the file system').one_line()}",
                       err=True)
            sys.exit(2)
        # usage errors of typer's bundled click (bad option values, missing arguments)
        if type(exc).__module__.endswith("click.exceptions") and hasattr(exc, "format_message"):
            message = exc.format_message().strip()
            if type(exc).__name__ == "NoArgsIsHelpError" or not message:
                # a group run without a command: the help is the answer (rich printed it already;
                # plain click hands it over as the message), not an empty `error: ` line
                if message:
                    typer.echo(message)
                sys.exit(2)
            typer.echo(single_line(f"error: {message}"), err=True)
            sys.exit(2)
        raise

