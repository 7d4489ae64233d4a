"""``pipeplan multi ...``: several DNNs on one SoC (joint mapping of concurrent networks).

An instance is a catalogue name (``multi/yolo+mobile``; ``pipeplan instances --system multi``)
or a multi-instance JSON file (``pipeplan.multi-instance/1``) whose networks name catalogue
instances or mapping instance files inside the file's folder. Bad input (an unknown network
instance, a network no PU can run, a weight <= 0, deadlines or demanded rates no plan can meet)
prints one ``error:`` line and exits 2 before anything is written.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from pipeplan.app.cli.common import listed
from pipeplan.app.cli.common import progress as _progress
from pipeplan.core.errors import InputError
from pipeplan.core.vocabulary import MULTI_OBJECTIVES

multi_app = typer.Typer(no_args_is_help=True,
                        help="Several DNNs on one SoC: joint mapping, exact and heuristic; export and run together.")

INSTANCE = typer.Argument(..., help="multi-network instance: a name (pipeplan instances --system multi) or a JSON file")
# rays per front of `multi study`: each is an exact solve and an NSGA-II run on every front
# instance (4 solves of up to --time-limit), and at 1,000 neighbouring rays lie 0.09 degrees
# apart, finer than the plot shows; more is a typo, refused before any work, not run for years
MAX_RAYS = 1000
OBJECTIVE_HELP = "; ".join(f"{o.name}: {o.label} ({o.direction})" for o in MULTI_OBJECTIVES.values())


def _objective(objective: str) -> str:
    if objective not in MULTI_OBJECTIVES:
        raise InputError("--objective", "", f"unknown objective {objective!r} (choose from {', '.join(MULTI_OBJECTIVES)})")
    return objective


def summary(result) -> str:
    """One line: the solver, its statuses, the objective's value, bound and gap."""
    o = MULTI_OBJECTIVES[result.params.get("objective", "fairness")]
    value = result.objectives.get(o.key)
    bound = result.bound.get(o.key)
    parts = [f"{result.solver}: {result.termination.value}/{result.quality.value}"]
    if value is not None:
        parts.append(f"{o.label} {value:.4g}")
    if bound is not None:
        parts.append(f"bound {bound:.4g} ({result.bound_source.get(o.key, 'bound')})")
    if result.gap is not None:
        parts.append(f"gap {result.gap:.2%}")
    parts.append(f"{result.wall_time_s:.1f} s")
    return ", ".join(parts)


def plan_lines(problem, result) -> list[str]:
    """Per network: its plan as PU letters per unit, ``|`` between stages, and its rate at the
    fairness objective's rates."""
    from pipeplan.formulations.mapping.multi.plan import joint_plan_from_dict

    joint = joint_plan_from_dict(result.plan)
    out = []
    for net in problem.networks:
        plan = joint.plans[net.name]
        place = plan.placement()
        letters = []
        for i, u in enumerate(net.problem.units):
            if i and place[u.name][0] != place[net.problem.units[i - 1].name][0]:
                letters.append("|")
            letters.append(place[u.name][1])
        fps = result.objectives.get(f"{net.name}.fps_fair")
        out.append(f"  {net.name}: {''.join(letters)}" + (f"  ({fps:.2f} fps at the fair rates)" if fps else ""))
    return out


@multi_app.command("solve")
def solve_cmd(instance: str = INSTANCE,
              solver: str = typer.Option("cpsat", "--solver", help=f"solver: {listed('multi solvers')}"),
              objective: str = typer.Option("fairness", "--objective", help=OBJECTIVE_HELP),
              time_limit: Optional[float] = typer.Option(60.0, "--time-limit", help="seconds"),
              seed: int = typer.Option(0, "--seed", help="seed of the solvers' random choices"),
              threads: int = typer.Option(2, "--threads", help="threads of the exact solvers"),
              out: Optional[Path] = typer.Option(None, "--out", help="write the SolveResult JSON here")):
    """Solve a multi-network instance: print a summary line (and write the SolveResult)."""
    import pipeplan
    from pipeplan.core.io import check_output, write_atomic
    from pipeplan.core.registry import get_solver
    from pipeplan.instances.multi import load_multi
    from pipeplan.solvers.mapping.multi.common import check_objective, network_fault
    from pipeplan.solvers.mapping.multi.exact import check_exact_objective

    _objective(objective)
    info = get_solver("multi", solver)
    if out:
        check_output(out)
    problem = load_multi(instance)
    try:          # what the solver would refuse, refused before any work
        (check_exact_objective if info.exact else check_objective)(problem, objective)
    except ValueError as exc:
        raise InputError("--objective", objective, str(exc)) from None
    fault = network_fault(problem, solver, info.exact)
    if fault:
        raise InputError(instance, "networks", fault)
    with _progress(f"{solver} {problem.name}"):
        result = pipeplan.solve(problem, solver, time_limit=time_limit, seed=seed, threads=threads,
                                objective=objective)
    if result.termination.value == "infeasible":
        raise InputError(instance, "networks", f"infeasible: {result.message}")
    if out:
        write_atomic(out, result.to_json())
    typer.echo(summary(result) + (f" -> {out}" if out else ""))
    if result.plan is not None:
        for line in plan_lines(problem, result):
            typer.echo(line)
    if result.termination.value == "error":
        typer.echo(result.message, err=True)
        raise typer.Exit(1)


@multi_app.command("evaluate")
def evaluate_cmd(instance: str = INSTANCE,
                 plan: Path = typer.Option(..., "--plan", help="a joint plan or SolveResult JSON file")):
    """Score a joint plan on every objective (JSON), with each network's figures."""
    import json

    from pipeplan.formulations.mapping.multi.evaluator import evaluate_plan_file
    from pipeplan.instances.multi import load_multi

    _, ev = evaluate_plan_file(load_multi(instance), plan)
    typer.echo(json.dumps(ev.to_dict(), indent=2))


@multi_app.command("study")
def study_cmd(out: Path = typer.Option(Path("results/multi"), "--out", help="folder of the study's tables and plots"),
              time_limit: float = typer.Option(60.0, "--time-limit", help="seconds per solver run"),
              threads: int = typer.Option(2, "--threads", help="threads of the exact solvers"),
              rays: int = typer.Option(11, "--rays", min=2, max=MAX_RAYS,
                                       help="rays per front (one exact solve each)"),
              seed: int = typer.Option(0, "--seed", help="seed of NSGA-II")):
    """Write results/multi/: exact vs heuristic joint plans and the baselines per instance, the
    goals' ratios, and fronts of one network's rate against the other's."""
    from pipeplan.app.cli.common import command_text
    from pipeplan.app.studies.multi import FILES, study
    from pipeplan.core.api import check_limits
    from pipeplan.core.io import staged_folder

    check_limits(time_limit, threads, seed=seed)
    with staged_folder(out, writes=FILES) as stage, _progress("multi study") as progress:
        md = study(stage, time_limit=time_limit, threads=threads, seed=seed, rays=rays,
                   command=command_text("pipeplan multi study"), progress=progress)
    typer.echo(md, nl=False)


@multi_app.command("export")
def export_cmd(instance: str = INSTANCE,
               plan: Path = typer.Option(..., "--plan", help="a joint plan or SolveResult JSON file"),
               out: Path = typer.Option(..., "--out", help="export folder (replaced if it holds an earlier joint export)"),
               seed: int = typer.Option(0, "--seed", help="seed of the random weights of weightless models")):
    """Cut every network's model along its plan: one export folder per network plus joint.json
    (run them together with `pipeplan run OUT`)."""
    from pipeplan.core.api import check_limits
    from pipeplan.deploy.multi import export_joint

    check_limits(None, seed=seed)      # else numpy's refusal of the seed is a traceback after the work
    with _progress(f"export {Path(instance).stem}"):
        doc = export_joint(plan, instance, out, seed=seed)
    for name, net in doc["networks"].items():
        alone, joint = net["predicted"]["alone"], net["predicted"]["joint"]
        typer.echo(f"{name} ({net['model']}) -> {out / net['folder']}: predicted {alone['fps']:.1f} fps alone, "
                   f"{joint['fair_fps']:.1f} fair, {joint['total_fps']:.1f} total, {joint['sustained_fps']:.1f} "
                   f"sustained; latency {alone['latency_ms']:.2f} ms alone, {joint['worst_latency_ms']:.2f} ms worst-case")
