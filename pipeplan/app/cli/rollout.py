"""``pipeplan rollout ...``: simulate, compare, optimum, sweep, reproduce (rollout admission).

A round comes from a catalogue name (``rollout/lsat-ar-R32``, ``rollout/tiny-0``), a problem
or trace file, or ``--workload W --R N [--K 8 --seed 0 --tail heavy]``; ``--rounds N`` makes it N
consecutive RL rounds and ``--staleness E`` lets the policies run round r on weights up to E
versions old. ``--engine FIELD=VALUE`` (repeatable) sets any ``EngineModel`` field, e.g. the
real-engine features ``replicas=2 router=group_affinity prefix_sharing=true retract_rule=vllm
policy_victims=true priority_preemption=true resume=swap swap_s_per_token=2.3e-6``. Bad input
(R < U, K < 1, a trace with a missing or negative length, a capacity that cannot hold one
request, zero replicas, rounds < 1, staleness < 0, an unknown preset, policy or engine field)
prints one ``error:`` line and exits 2 before anything is written. ``compare`` where every
solver failed prints its rows and exits 1 (one ``error:`` line naming the first failure).
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Optional

import typer

from pipeplan.app.cli.common import command_text, fail_if_all_failed, listed, name_list, refuse_twice
from pipeplan.app.cli.common import progress as _progress
from pipeplan.core.api import check_limits
from pipeplan.core.errors import InputError
from pipeplan.core.io import check_out_folder, check_output, parse_number, staged_folder
from pipeplan.core.param_values import MAX_WHOLE
from pipeplan.core.sizes import WORKER_PROCESS_BYTES, check_memory
from pipeplan.formulations.rollout.workloads import REPRO_SEEDS

rollout_app = typer.Typer(no_args_is_help=True, help="Rollout admission (RolloutPipe): simulate policies, offline optimum, reproduction.")

ALL = "all"


def _engine_changes(items: list[str] | None) -> dict:
    """``FIELD=VALUE`` pairs as EngineModel field values, converted by the field's type."""
    from pipeplan.formulations.rollout.problem import EngineModel

    types = {f.name: f.type for f in dataclasses.fields(EngineModel)}
    out = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in types:
            raise InputError("--engine", key or item, f"expected FIELD=VALUE with FIELD one of {', '.join(types)}")
        if key in out:      # a second replicas=... had silently replaced the first
            raise InputError("--engine", key, "given twice")
        kind = types[key]
        if kind == "bool":
            if text.lower() not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
                raise InputError("--engine", key, f"expected a bool value, got {text!r}")
            out[key] = text.lower() in ("true", "1", "yes", "on")
        elif kind in ("int", "float"):  # as every number pipeplan reads: 1_0 had been 10, a full-width 1 a 1
            out[key] = parse_number(text, "--engine", key, integer=kind == "int")
        else:
            out[key] = text
    return out


def _check_jitter(jitter: Optional[float]) -> None:
    if jitter is not None and not (math.isfinite(jitter) and jitter >= 0):
        raise InputError("--jitter", "", f"must be a number of groups >= 0, got {jitter}")


def _problem(instance, workload, R, K, seed, max_response, trace, kv_capacity, max_num_seqs, jitter,
             engine=None, tail="paper", rounds=1):
    from pipeplan.formulations.rollout.traces import load_trace
    from pipeplan.formulations.rollout.workloads import ARRIVAL_JITTER_GROUPS, K_PAPER, preset_round
    from pipeplan.instances.rollout import load_instance

    _check_jitter(jitter)
    check_limits(None, seed=seed)          # the lengths and arrival orders are drawn from it
    given = [x is not None for x in (instance, workload, trace)]
    if sum(given) != 1:
        raise InputError("rollout", "", "give exactly one of INSTANCE, --workload or --trace")
    # options that shape a drawn round: ignoring them would silently hand back another round
    drawn = {"--K": K, "--max-response": max_response, "--tail": None if tail == "paper" else tail}
    chosen = {"--R": R, "--jitter": jitter}                 # a trace takes these too
    unused = [n for n, v in drawn.items() if v is not None and workload is None]
    unused += [n for n, v in chosen.items() if v is not None and instance is not None]
    if unused:
        scope = "--workload presets" if unused[0] in drawn else "--workload presets and --trace files"
        raise InputError(unused[0], "", f"applies to {scope} only, not to {instance or trace}")
    if instance is not None:
        problem = load_instance(instance)
    elif trace is not None:
        problem = load_trace(trace, R=R, jitter_groups=jitter or 0.0, seed=seed)
    else:
        problem = preset_round(workload, 32 if R is None else R, K=K_PAPER if K is None else K, seed=seed,
                               max_response_tokens=max_response,
                               jitter_groups=ARRIVAL_JITTER_GROUPS if jitter is None else jitter, tail=tail,
                               rounds=rounds)
    if rounds != 1 and workload is None:
        problem = dataclasses.replace(problem, rounds=rounds)
    changes = {k: v for k, v in (("kv_capacity_tokens", kv_capacity), ("max_num_seqs", max_num_seqs)) if v is not None}
    changes.update(_engine_changes(engine))
    if changes:
        problem = dataclasses.replace(problem, engine=dataclasses.replace(problem.engine, **changes))
    return problem


def _names(text: str) -> list[str]:
    from pipeplan.core.registry import get_solver, solvers
    from pipeplan.solvers.rollout import OFFLINE
    if text == ALL:
        return [s.name for s in solvers("rollout") if s.name not in OFFLINE]
    names = name_list("--policies", text)
    for n in names:
        get_solver("rollout", n)
    return names


# options shared by the commands that take one round
INSTANCE = typer.Argument(None, help="catalogue name (rollout/lsat-ar-R32) or a .json/.csv/.jsonl file")
WORKLOAD_HELP = f"workload preset: {listed('rollout workloads')}"
WORKLOAD = typer.Option(None, "--workload", help=WORKLOAD_HELP)
R_OPT = typer.Option(None, "--R", help="groups (prompts) per round")
K_OPT = typer.Option(None, "--K", help="samples per group (default 8)")
SEED = typer.Option(0, "--seed", help="seed of the response lengths and arrival order")
MAXR = typer.Option(None, "--max-response", help="max response tokens (truncation)")
TRACE = typer.Option(None, "--trace", help="CSV/JSONL trace: prompt_id, sample_id, response_tokens")
KVCAP = typer.Option(None, "--kv-capacity", help="override the engine's KV capacity (tokens)")
SEQS = typer.Option(None, "--max-num-seqs", help="override the engine's max running sequences")
JITTER = typer.Option(None, "--jitter", help="arrival jitter in groups (0 = group-major)")
ENGINE = typer.Option(None, "--engine", help="FIELD=VALUE: set an engine field (repeatable), e.g. replicas=2, "
                      "router=group_affinity, prefix_sharing=true, retract_rule=vllm, policy_victims=true, "
                      "priority_preemption=true, resume=swap, swap_s_per_token=2.3e-6")
TAIL = typer.Option("paper", "--tail", help="length tail of a --workload preset: paper, light, heavy, pareto")
ROUNDS = typer.Option(1, "--rounds", min=1, help="consecutive RL rounds (R groups each)")
STALENESS = typer.Option(0, "--staleness", min=0, help="weight versions a request may lag its round "
                         "(0 on-policy, 1 one-step off-policy, E: bounded staleness), at most --rounds - 1")
THREADS_HELP = "threads of CP-SAT"
FRONTIER_HELP = "F_w, groups (fgd-*)"
FRONTIER_DEFAULT = 2
# rounds drawn per setting of a study: each one runs every policy (0.1-2 s a round), so 1,000
# is hours of work already; more is a typo, refused before any work rather than run for days
MAX_STUDY_SEEDS = 1000
# The files each study writes into --out: checked before its work, listed when it is done.
COMPARE_FILES = ("compare.md", "compare.csv")
SWEEP_FILES = ("sweep.csv", "sweep.md", "regime.png")
REPRO_FILES = ("reproduction.md", "reproduction.csv", "gantt_sync.png", "gantt_cgp-fgd.png")
FRONTIER_FILES = ("fgd_frontier.md", "fgd_frontier.csv", "fgd_frontier.png")
ASYNC_FILES = ("async.md", "async.csv", "async.png")
R32_FILES = ("r32_miss.md", "r32_miss.csv")


def _written(out: Path, files: tuple[str, ...]) -> str:
    return f"\nwritten: {out}/" + ", ".join(files)


def _check_policy_options(problem, frontier: int, staleness: int) -> None:
    """``--frontier`` F_w at most the round's groups (F_w = R already holds every group; the
    default 2 always passes) and ``--staleness`` at most ``--rounds`` - 1 (every later round is
    then released at once; on one round it has nothing to lag behind)."""
    if frontier > max(problem.R, FRONTIER_DEFAULT):
        raise InputError("--frontier", "", f"{frontier} groups, but {problem.name} has {problem.R}: F_w is at most "
                         f"the number of groups (R = {problem.R} already holds every one)")
    if staleness > problem.rounds - 1:
        raise InputError("--staleness", "", f"{staleness} weight versions, but {problem.name} has {problem.rounds} "
                         f"round{'s' * (problem.rounds > 1)}: at most --rounds - 1 = {problem.rounds - 1}")


def _check_outputs(*paths: Optional[Path]) -> None:
    """Before any work, every file a command will write (so one cannot be written and the next
    refused): each passes ``check_output`` (which also refuses a path below a file), and no two
    are the same."""
    seen: set[Path] = set()
    for path in filter(None, paths):
        check_output(path)
        real = Path(path).resolve()
        if real in seen:
            raise InputError(str(path), "", "given for two outputs of this command")
        seen.add(real)


@rollout_app.command("simulate")
def simulate_cmd(instance: Optional[str] = INSTANCE,
                 policy: str = typer.Option("fgd-soft", "--policy", help=f"online policy: {listed('rollout policies')} "
                                            "(the offline optimum: `pipeplan rollout optimum`)"),
                 frontier: int = typer.Option(FRONTIER_DEFAULT, "--frontier", min=1, help=FRONTIER_HELP),
                 workload: Optional[str] = WORKLOAD, R: Optional[int] = R_OPT, K: Optional[int] = K_OPT, seed: int = SEED,
                 max_response: Optional[int] = MAXR, trace: Optional[Path] = TRACE,
                 kv_capacity: Optional[int] = KVCAP, max_num_seqs: Optional[int] = SEQS,
                 jitter: Optional[float] = JITTER, engine: Optional[list[str]] = ENGINE, tail: str = TAIL,
                 rounds: int = ROUNDS, staleness: int = STALENESS,
                 out: Optional[Path] = typer.Option(None, "--out", help="write the full schedule JSON here"),
                 gantt: Optional[Path] = typer.Option(None, "--gantt", help="write a Gantt chart PNG here"),
                 as_json: bool = typer.Option(False, "--json", help="print the metrics as JSON")):
    """Simulate one round under one policy: metrics, checked schedule, optional Gantt chart."""
    from pipeplan.app.studies.rollout import gantt_schedule
    from pipeplan.app.studies.rollout_figures import GANTT_BYTES_PER_REQUEST
    from pipeplan.app.studies.rollout_figures import gantt as gantt_plot
    from pipeplan.core.io import write_json
    from pipeplan.core.registry import get_solver
    from pipeplan.core.sizes import check_bytes
    from pipeplan.formulations.rollout.checker import check
    from pipeplan.formulations.rollout.problem import BYTES_PER_REQUEST
    from pipeplan.solvers.rollout import OFFLINE
    get_solver("rollout", policy)
    if policy in OFFLINE:
        raise InputError("--policy", "", f"{policy} is an offline planner; use `pipeplan rollout optimum`")
    problem = _problem(instance, workload, R, K, seed, max_response, trace, kv_capacity, max_num_seqs, jitter,
                       engine, tail, rounds)
    _check_policy_options(problem, frontier, staleness)
    _check_outputs(out, gantt)         # once the inputs are read: neither output may be one of them
    if gantt:
        check_bytes(str(gantt), "--gantt", f"a chart of {problem.n_requests:,} requests",
                    problem.n_requests * (BYTES_PER_REQUEST + GANTT_BYTES_PER_REQUEST))
    schedule = gantt_schedule(problem, policy, frontier, staleness)
    violations = check(problem, schedule, staleness=staleness)
    m = schedule.metrics()
    if out:
        write_json(out, {"instance": problem.name, "problem": problem.to_dict(), **schedule.to_dict(),
                         "violations": violations})
    if gantt:
        gantt_plot(problem, schedule, gantt, f"{problem.name} / {policy}")
    if as_json:
        typer.echo(json.dumps({"instance": problem.name, "policy": policy, **m, "violations": len(violations)}))
    else:
        rounds_text = (f", {problem.rounds} rounds, staleness <= {staleness}: {m['samples_per_s']:.2f} samples/s, "
                       f"mean staleness {m['mean_staleness']:.2f}" if problem.rounds > 1 else "")
        features = problem.engine.features()
        typer.echo(f"{policy} on {problem.name} (R={problem.R}, K={problem.K}, U={problem.U}"
                   + (f"; engine: {', '.join(features)}" if features else "") + "): train end "
                   f"{m['train_end_s']:.1f} s, waiting ratio {m['waiting_ratio']:.1%}, first dispatch "
                   f"{m['first_dispatch_s']:.1f} s, rollout {m['rollout_makespan_s']:.1f} s, trainer "
                   f"{m['trainer_compute_s']:.1f} s, {m['retractions']} retractions{rounds_text}; checker: "
                   + ("ok" if not violations else f"{len(violations)} violations, first: {violations[0]}"))
    if violations:
        raise typer.Exit(1)


@rollout_app.command("compare")
def compare_cmd(instance: Optional[str] = INSTANCE,
                policies: str = typer.Option(ALL, "--policies", help=f"comma list of {listed('rollout policies')}; "
                                             f"or {ALL}"),
                offline: bool = typer.Option(False, "--offline", help="also run the CP-SAT offline optimum"),
                time_limit: float = typer.Option(30.0, "--time-limit", help="seconds for CP-SAT"),
                threads: int = typer.Option(1, "--threads", help=THREADS_HELP),
                frontier: int = typer.Option(FRONTIER_DEFAULT, "--frontier", min=1, help=FRONTIER_HELP),
                workload: Optional[str] = WORKLOAD, R: Optional[int] = R_OPT, K: Optional[int] = K_OPT, seed: int = SEED,
                max_response: Optional[int] = MAXR, trace: Optional[Path] = TRACE,
                kv_capacity: Optional[int] = KVCAP, max_num_seqs: Optional[int] = SEQS,
                jitter: Optional[float] = JITTER, engine: Optional[list[str]] = ENGINE, tail: str = TAIL,
                rounds: int = ROUNDS, staleness: int = STALENESS,
                out: Optional[Path] = typer.Option(None, "--out", help="folder for compare.md and compare.csv")):
    """Every policy (and optionally the offline optimum) on one round: a table of metrics and ratios."""
    from pipeplan.app.studies.rollout import competitive_rows, rows_markdown, solve_all
    from pipeplan.core.io import write_atomic
    from pipeplan.core.tables import csv_text

    names = _names(policies)
    names += ["cpsat"] if offline and "cpsat" not in names else []
    problem = _problem(instance, workload, R, K, seed, max_response, trace, kv_capacity, max_num_seqs, jitter,
                       engine, tail, rounds)
    if offline and problem.rounds > 1:
        raise InputError("--offline", "", "the offline optimum plans one round; drop --offline or --rounds")
    _check_policy_options(problem, frontier, staleness)
    if out is not None:
        check_out_folder(out, writes=COMPARE_FILES)
    with _progress(f"compare {problem.name}"):
        results = solve_all(problem, names, time_limit=time_limit, threads=threads, seed=seed, frontier=frontier,
                            staleness=staleness)
    rows = competitive_rows(results)
    md = rows_markdown(rows, problem.name)
    if out:
        with staged_folder(out) as stage:
            write_atomic(stage / "compare.md", md)
            write_atomic(stage / "compare.csv", csv_text(rows, list(rows[0])))
    typer.echo(md, nl=False)
    fail_if_all_failed(f"{problem.name}: rollout compare", results)


@rollout_app.command("optimum")
def optimum_cmd(instance: Optional[str] = INSTANCE,
                time_limit: float = typer.Option(60.0, "--time-limit", help="seconds"),
                threads: int = typer.Option(2, "--threads", help=THREADS_HELP),
                linear: bool = typer.Option(False, "--linear", help="linearize the engine first (exact offline model)"),
                workload: Optional[str] = WORKLOAD, R: Optional[int] = R_OPT, K: Optional[int] = K_OPT, seed: int = SEED,
                max_response: Optional[int] = MAXR, trace: Optional[Path] = TRACE,
                kv_capacity: Optional[int] = KVCAP, max_num_seqs: Optional[int] = SEQS,
                jitter: Optional[float] = JITTER, engine: Optional[list[str]] = ENGINE, tail: str = TAIL,
                out: Optional[Path] = typer.Option(None, "--out", help="write the CP-SAT SolveResult JSON here")):
    """Offline optimum with known lengths (CP-SAT; also the just-in-time planner step-plan on
    one engine), and each policy's competitive ratio to it (or to the lower bound, flagged,
    when the optimum is not proven)."""
    from pipeplan.app.studies.rollout import competitive_rows, linearized, rows_markdown, solve_all
    from pipeplan.core.io import write_atomic

    problem = _problem(instance, workload, R, K, seed, max_response, trace, kv_capacity, max_num_seqs, jitter,
                       engine, tail)
    if linear:
        problem = linearized(problem)
    _check_outputs(out)
    with _progress(f"optimum {problem.name}"):
        planners = ["cpsat"] + (["step-plan"] if problem.engine.single else [])
        results = solve_all(problem, planners + _names(ALL), time_limit=time_limit, threads=threads, seed=seed)
    r = results["cpsat"]
    if out and r.objectives:
        write_atomic(out, r.to_json())

    def shown(value, fmt: str, unit: str = "") -> str:   # a failed solve has none: "-", as in its
        return "-" if value is None else format(value, fmt) + unit   # table row ("nan" before)
    typer.echo(f"cpsat: {r.termination.value}/{r.quality.value} train end "
               f"{shown(r.objectives.get('train_end_s'), '.3f', ' s')}, bound {shown(r.bound.get('train_end_s'), '.3f', ' s')}, "
               f"gap {shown(r.gap, '.2%')} ({r.wall_time_s:.1f} s)\n{r.message}\n")
    typer.echo(rows_markdown(competitive_rows(results), problem.name), nl=False)
    if r.termination.value == "error":
        raise typer.Exit(1)


def _floats(text: str, name: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(name, "", f"expected comma-separated numbers, got {text!r}") from None
    if not values or any(not (v > 0 and math.isfinite(v)) for v in values):
        raise InputError(name, "", f"expected positive finite numbers, got {text!r}")
    refuse_twice(name, values)
    return values


def _check_rhos(problems, values: list[float]) -> None:
    """Every rho must leave the scaled trainer within its fields' limits, checked before any
    work (1e308 had been refused as `trainer.s_per_token: ... inf`, a field the user never gave,
    after the smaller rhos had run)."""
    from pipeplan.app.studies.rollout import sync_rho, with_rho
    for problem in problems:
        now = sync_rho(problem)
        for rho in values:
            try:
                with_rho(problem, rho, now=now)
            except InputError as exc:
                raise InputError("--rhos", f"{rho:g}", f"scales {problem.name}'s trainer past its limits "
                                                       f"({exc.field}: {exc.message})") from None


def _whole_numbers(text: str, name: str, least: int) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(name, "", f"expected comma-separated whole numbers, got {text!r}") from None
    if not values or any(not least <= v <= MAX_WHOLE for v in values):
        raise InputError(name, "", f"expected whole numbers from {least} to {MAX_WHOLE:,}, got {text!r}")
    refuse_twice(name, values)
    return values


def _workload_names(text: str) -> list[str]:
    """A ``--workloads`` comma list: at least one name (each checked by the caller)."""
    return name_list("--workloads", text)


def _engines(text: str) -> list[str]:
    kinds = [e.strip() for e in text.split(",") if e.strip()]
    refuse_twice("--engines", kinds)
    if not kinds or any(e not in ("real", "linear") for e in kinds):
        raise InputError("--engines", "", f"expected real and/or linear, got {text!r}")
    return kinds


@rollout_app.command("sweep")
def sweep_cmd(workload: str = typer.Option("lsat-ar", "--workload", help=WORKLOAD_HELP),
              R: int = typer.Option(32, "--R", help="groups (prompts) per round"),
              seed: int = SEED, rhos: str = typer.Option("0.25,0.5,1,2,4", "--rhos", help="comma list"),
              engines: str = typer.Option("real,linear", "--engines", help="real, linear, or both"),
              time_limit: float = typer.Option(20.0, "--time-limit", help="seconds per CP-SAT run"),
              threads: int = typer.Option(1, "--threads", help=THREADS_HELP),
              frontier: int = typer.Option(FRONTIER_DEFAULT, "--frontier", min=1, help=FRONTIER_HELP),
              out: Path = typer.Option(Path("results/rollout"), "--out", help="folder of sweep.csv, sweep.md, regime.png")):
    """rho sweep (total trainer time / rollout makespan): best policy and each policy's ratio to
    the optimum per regime; writes sweep.csv, sweep.md and regime.png."""
    from pipeplan.app.studies.rollout import SWEEP_COLUMNS, sweep, sweep_markdown
    from pipeplan.app.studies.rollout_figures import regime_plot
    from pipeplan.core.io import write_atomic
    from pipeplan.core.tables import csv_text
    from pipeplan.formulations.rollout.workloads import preset_round

    check_limits(time_limit, threads)
    values = _floats(rhos, "--rhos")
    kinds = _engines(engines)
    base = preset_round(workload, R, seed=seed)
    _check_rhos([base], values)     # bad presets and R < U fail here too
    _check_policy_options(base, frontier, 0)       # as compare: F_w = 33 at R = 32 had run
    command = command_text("pipeplan rollout sweep")
    check_out_folder(out, writes=SWEEP_FILES)
    with _progress("sweep") as progress:
        rows = sweep(workload=workload, R=R, seed=seed, rhos=values, engines=kinds, time_limit=time_limit,
                     threads=threads, frontier=frontier, progress=progress)
    title = f"{workload}, R = {R}, seed {seed}"
    md = sweep_markdown(rows, command, title)
    with staged_folder(out) as stage:
        write_atomic(stage / "sweep.csv", csv_text(rows, SWEEP_COLUMNS))
        write_atomic(stage / "sweep.md", md)
        regime_plot(rows, stage / "regime.png", f"regime sweep: {title}")
    typer.echo(md + _written(out, SWEEP_FILES))


@rollout_app.command("reproduce")
def reproduce_cmd(seeds: int = typer.Option(REPRO_SEEDS, "--seeds", min=1, max=MAX_STUDY_SEEDS, help="rounds per setting"),
                  as_json: bool = typer.Option(False, "--json", help="print one JSON record per setting"),
                  max_response: Optional[int] = MAXR, jitter: Optional[float] = JITTER,
                  frontier: int = typer.Option(FRONTIER_DEFAULT, "--frontier", min=1, help=FRONTIER_HELP),
                  sensitivity: bool = typer.Option(True, "--sensitivity/--no-sensitivity",
                                                   help="also write the sensitivity table (or not)"),
                  out: Path = typer.Option(Path("results/rollout"), "--out",
                                           help="folder of reproduction.md/.csv and the Gantt charts")):
    """The 12 settings of the paper (4 workloads x R in {32, 64, 96}): reductions of CGP and
    CGP+FGD vs the synchronous baseline next to the paper's bands; writes reproduction.md/.csv
    and a Gantt chart of one round."""
    from pipeplan.app.studies.rollout import REPRO_COLUMNS, gantt_schedule, reproduce, reproduction_markdown
    from pipeplan.app.studies.rollout import sensitivity as sensitivity_rows
    from pipeplan.app.studies.rollout_figures import gantt
    from pipeplan.core.io import write_atomic
    from pipeplan.core.tables import csv_text
    from pipeplan.formulations.rollout.workloads import ARRIVAL_JITTER_GROUPS, preset_round

    _check_jitter(jitter)
    jitter = ARRIVAL_JITTER_GROUPS if jitter is None else jitter
    sample = preset_round("lsat-ar", 32, max_response_tokens=max_response, jitter_groups=jitter)   # validates
    _check_policy_options(sample, frontier, 0)     # its smallest R, 32: F_w = 33 had run
    command = command_text("pipeplan rollout reproduce")
    check_out_folder(out, writes=REPRO_FILES)
    with _progress("reproduce") as progress:
        records = reproduce(seeds=seeds, max_response=max_response, jitter=jitter, frontier=frontier, progress=progress)
        sens = sensitivity_rows(seeds=seeds, frontier=frontier) if sensitivity else None
    md = reproduction_markdown(records, command, sens)
    with staged_folder(out) as stage:
        write_atomic(stage / "reproduction.md", md)
        write_atomic(stage / "reproduction.csv", csv_text(records, REPRO_COLUMNS))
        for policy, label in (("sync", "sync"), ("fgd-soft", "cgp-fgd")):
            gantt(sample, gantt_schedule(sample, policy, frontier), stage / f"gantt_{label}.png",
                  f"{sample.name} / {policy}")
    if as_json:
        for r in records:
            typer.echo(json.dumps(r))
    else:
        typer.echo(md + _written(out, REPRO_FILES))


@rollout_app.command("frontier")
def frontier_cmd(workloads: str = typer.Option(",".join(("lsat-ar", "sci-xw", "sci-jl", "olyphys")), "--workloads",
                                               help=WORKLOAD_HELP + " (comma list)"),
                 seeds: int = typer.Option(3, "--seeds", min=1, max=MAX_STUDY_SEEDS, help="rounds drawn per setting"),
                 out: Path = typer.Option(Path("results/rollout"), "--out", help="folder of fgd_frontier.md/.csv/.png")):
    """FGD's hard gate against CGP over the frontier width F_w on the paper's engine (full KV),
    with attention switched off as the control and the offline planner as the yardstick; writes
    fgd_frontier.md/.csv/.png (about 17 min)."""
    from pipeplan.app.studies.rollout_frontier import COLUMNS, frontier_markdown, frontier_plot, frontier_study
    from pipeplan.core.io import write_atomic
    from pipeplan.core.tables import csv_text
    from pipeplan.formulations.rollout.workloads import preset_round

    names = _workload_names(workloads)
    for w in names:
        preset_round(w, 32)                      # unknown presets fail before any work
    command = command_text("pipeplan rollout frontier")
    check_out_folder(out, writes=FRONTIER_FILES)
    with _progress("frontier") as progress:
        rows = frontier_study(workloads=names, seeds=seeds, progress=progress)
    md = frontier_markdown(rows, command, seeds)
    with staged_folder(out) as stage:
        write_atomic(stage / "fgd_frontier.md", md)
        write_atomic(stage / "fgd_frontier.csv", csv_text(rows, COLUMNS))
        frontier_plot(rows, stage / "fgd_frontier.png", "FGD-hard vs CGP over the frontier width (paper's engine)")
    typer.echo(md + _written(out, FRONTIER_FILES))


@rollout_app.command("async")
def async_cmd(workloads: str = typer.Option("lsat-ar,olyphys", "--workloads", help=WORKLOAD_HELP + " (comma list)"),
              R: int = typer.Option(32, "--R", min=1, help="groups (prompts) per round"),
              rounds: int = typer.Option(4, "--rounds", min=1, help="consecutive RL rounds"),
              stalenesses: str = typer.Option("0,1,2,3", "--staleness", help="comma list of staleness bounds (>= 0)"),
              seeds: int = typer.Option(2, "--seeds", min=1, max=MAX_STUDY_SEEDS, help="rounds drawn per setting"),
              out: Path = typer.Option(Path("results/rollout"), "--out", help="folder of async.md/.csv/.png")):
    """Several RL rounds: the on-policy pipeline, one-step off-policy overlap and bounded
    staleness as policy families; throughput against staleness; writes async.md/.csv/.png."""
    from pipeplan.app.studies.rollout_async import ASYNC_COLUMNS, async_markdown, async_plot, async_study
    from pipeplan.core.io import write_atomic
    from pipeplan.core.tables import csv_text
    from pipeplan.formulations.rollout.workloads import preset_round

    names = _workload_names(workloads)
    etas = _whole_numbers(stalenesses, "--staleness", 0)
    if 0 not in etas:       # each row's speedup is against the on-policy run (staleness 0)
        raise InputError("--staleness", "", f"must include 0, the on-policy baseline of the speedups, got {stalenesses!r}")
    for w in names:     # bad presets, R < U, and a staleness past --rounds - 1 (it had run) fail before any work
        _check_policy_options(preset_round(w, R, rounds=rounds), FRONTIER_DEFAULT, max(etas))
    command = command_text("pipeplan rollout async")
    check_out_folder(out, writes=ASYNC_FILES)
    with _progress("async") as progress:
        rows = async_study(workloads=names, R=R, rounds=rounds, stalenesses=etas, seeds=seeds, progress=progress)
    md = async_markdown(rows, command)
    with staged_folder(out) as stage:
        write_atomic(stage / "async.md", md)
        write_atomic(stage / "async.csv", csv_text(rows, ASYNC_COLUMNS))
        async_plot(rows, stage / "async.png", f"throughput vs staleness ({rounds} rounds of R = {R})")
    typer.echo(md + _written(out, ASYNC_FILES))


@rollout_app.command("explain-r32")
def explain_r32_cmd(seeds: int = typer.Option(REPRO_SEEDS, "--seeds", min=1, max=MAX_STUDY_SEEDS, help="rounds per setting"),
                    out: Path = typer.Option(Path("results/rollout"), "--out", help="folder of r32_miss.md/.csv")):
    """Why the R = 32 settings miss the paper's end-time band: the 12 settings with one modelled
    effect changed at a time (engine features, length tails, within-prompt spread); writes
    r32_miss.md/.csv."""
    from pipeplan.app.studies.rollout_r32 import R32_COLUMNS, explain_r32, r32_markdown
    from pipeplan.core.io import write_atomic
    from pipeplan.core.tables import csv_text

    command = command_text("pipeplan rollout explain-r32")
    check_out_folder(out, writes=R32_FILES)
    with _progress("explain-r32") as progress:
        rows = explain_r32(seeds=seeds, progress=progress)
    md = r32_markdown(rows, command)
    with staged_folder(out) as stage:
        write_atomic(stage / "r32_miss.md", md)
        write_atomic(stage / "r32_miss.csv", csv_text(rows, R32_COLUMNS))
    typer.echo(md + _written(out, R32_FILES))


@rollout_app.command("regimes")
def regimes_cmd(workload: str = typer.Option("lsat-ar", "--workload", help=WORKLOAD_HELP),
                seeds: int = typer.Option(2, "--seeds", min=1, max=MAX_STUDY_SEEDS, help="rounds drawn per regime"),
                cpsat_time_limit: float = typer.Option(10.0, "--cpsat-time-limit",
                                                       help="seconds per CP-SAT reference run (0: none)"),
                jobs: int = typer.Option(2, "--jobs", min=1, help="processes that run the policies"),
                frontier: int = typer.Option(FRONTIER_DEFAULT, "--frontier", min=1, help=FRONTIER_HELP),
                out: Path = typer.Option(Path("results/rollout"), "--out",
                                         help="folder of fgd_regimes.md/.csv and the plots")):
    """Where FGD matters: FGD, CGP, the engines' retract rules and the oracle policies over KV
    pressure x length tail x replicas x R x asynchrony, against the best schedule found and the
    best bound; writes fgd_regimes.md/.csv and three plots (about 6 min on 2 cores)."""
    from pipeplan.app.studies.rollout_regimes import FILES as REGIME_FILES
    from pipeplan.app.studies.rollout_regimes import regime_map, write_regimes
    from pipeplan.core.registry import get_solver
    from pipeplan.formulations.rollout.workloads import preset_round

    check_limits(cpsat_time_limit, option="--cpsat-time-limit", zero_ok=True)
    check_memory("--jobs", jobs, WORKER_PROCESS_BYTES)
    preset_round(workload, 32)                  # an unknown preset fails before any work
    # the workers' FGD policies take --frontier: refused here, before any work (10^12 had been
    # refused in a worker, whose error hung the pool)
    get_solver("rollout", "fgd-soft").check_params({"frontier": frontier}, "--frontier")
    command = command_text("pipeplan rollout regimes")
    check_out_folder(out, writes=REGIME_FILES)
    with _progress("regimes") as progress:
        rows = regime_map(workload=workload, seeds=seeds, cpsat_seeds=1 if cpsat_time_limit > 0 else 0,
                          cpsat_time_limit=cpsat_time_limit or 10.0, frontier=frontier, workers=jobs,
                          progress=progress)
    paths = write_regimes(rows, out, command)
    typer.echo(f"{len(rows)} regimes; written: " + ", ".join(str(p) for p in paths))


@rollout_app.command("optimum-gaps")
def optimum_gaps_cmd(workloads: str = typer.Option(",".join(("lsat-ar", "sci-xw", "sci-jl", "olyphys")), "--workloads",
                                                   help=WORKLOAD_HELP + " (comma list)"),
                     time_limit: float = typer.Option(60.0, "--time-limit", help="seconds per CP-SAT run (R = 32)"),
                     bound_time: float = typer.Option(60.0, "--bound-time",
                                                      help="seconds per flow-shop relaxation and per step-indexed bound (R = 32)"),
                     branch_time: Optional[float] = typer.Option(
                         None, "--branch-time", help="seconds of branching on the round's last step after the "
                                                     "step-indexed bound (R = 32; 0: none; default: the "
                                                     "study's BRANCH_TIME, 420 s)"),
                     lns_time: float = typer.Option(
                         120.0, "--lns-time", help="seconds of large-neighbourhood search (cpsat-lns) per "
                                                   "linear-engine setting, every R (0: none)"),
                     bound_rs: str = typer.Option("32", "--bound-rs", help="R values (comma list) where the slow "
                                                                           "bounds run"),
                     threads: int = typer.Option(2, "--threads", help=THREADS_HELP),
                     rhos: str = typer.Option("0.25,0.5,1,2,4", "--rhos",
                                              help="comma list for the lsat-ar R = 32 sweep ('' or none: no sweep)"),
                     engines: str = typer.Option("real,linear", "--engines", help="real, linear, or both"),
                     rs: str = typer.Option("32,64,96", "--rs", help="groups per round of the preset rows (comma list)"),
                     out: Path = typer.Option(Path("results/rollout"), "--out", help="folder of optimum_gaps.md/.csv")):
    """How tight the offline optimum is: the best schedule any solver finds against the best
    proven lower bound, per workload and R on the real and the linear engine, and along a rho
    sweep; writes optimum_gaps.md/.csv (about 105 min on 2 cores with the defaults: 77 before
    the large-neighbourhood search's 120 s per linear setting)."""
    from pipeplan.app.studies.rollout_optimum import BRANCH_TIME, optimum_gaps, write_optimum_gaps
    from pipeplan.app.studies.rollout_optimum import FILES as GAPS_FILES
    from pipeplan.formulations.rollout.workloads import preset_round

    check_limits(time_limit, threads)
    check_limits(bound_time, threads, option="--bound-time")
    check_limits(branch_time, threads, option="--branch-time", zero_ok=True)
    check_limits(lns_time, threads, option="--lns-time", zero_ok=True)
    branch_time = BRANCH_TIME if branch_time is None else branch_time
    names = _workload_names(workloads)
    Rs = _whole_numbers(rs, "--rs", 1)
    for w in names:
        for R in {32, *Rs}:                     # the rho sweep's R = 32 too
            preset_round(w, R)                  # unknown presets, R below the update size: before any work
    values = [] if rhos.strip().lower() in ("", "none") else _floats(rhos, "--rhos")
    _check_rhos([preset_round("lsat-ar", 32)], values)      # the rho rows: optimum_gaps' rho_workload and rho_R
    bound_Rs = _whole_numbers(bound_rs, "--bound-rs", 1)
    kinds = _engines(engines)
    command = command_text("pipeplan rollout optimum-gaps")
    check_out_folder(out, writes=GAPS_FILES)
    with _progress("optimum-gaps") as progress:
        rows = optimum_gaps(workloads=names, time_limit=time_limit, bound_time=bound_time, threads=threads,
                            rhos=values, engines=kinds, Rs=tuple(Rs), bound_Rs=tuple(bound_Rs), branch_time=branch_time,
                            lns_time=lns_time, progress=progress)
    md = write_optimum_gaps(rows, out, command, branch_time, lns_time)
    typer.echo(md + _written(out, GAPS_FILES))
