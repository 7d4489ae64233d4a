"""``pipeplan gradcode ...``: place, verify, simulate, train and study gradient codes."""
from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer

from pipeplan.app.cli.common import command_text, listed, name_list
from pipeplan.app.cli.common import progress as _progress
from pipeplan.core.api import check_limits
from pipeplan.core.errors import InputError
from pipeplan.core.io import max_input_bytes, staged_folder
from pipeplan.core.sizes import check_bytes, check_memory, human_bytes
from pipeplan.core.vocabulary import GRADCODE_OBJECTIVES

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Pipelined gradient coding: placements, verification, simulation, training.")

# Memory per unit of an option, for check_memory (measured peak over a run, with margin):
# simulate keeps a float64 per step, a sorted copy for the percentiles and the histogram's;
# verify samples an (sets x n) random matrix, its argsort and a survivor mask per set;
# train records loss, time and survivors per step beside the (steps x n) delay matrix.
SIMULATE_BYTES_PER_STEP = 24
VERIFY_BYTES_PER_SET_AND_WORKER = 32
TRAIN_BYTES_PER_STEP = 256
# place: the code's JSON holds support and B as dense n x k lists (Python lists of ints and
# floats, then their text; measured 83 bytes per entry at n = 6,000, 2.9 GB peak)
PLACE_BYTES_PER_ENTRY = 88
PLACE_TEXT_BYTES_PER_ENTRY = 8      # of the written file: 7.99 MB for FR and 8.04 MB for CR at n = 1,000
# simulate, train and verify hold the code (support and B, dense n x k) and their decoding work
# on it: peaks measured per entry of n x k (hostile-input audit, where none was checked): train
# 119-132 bytes (n = 2,000: 529 MB; 3,000: 1.07 GB), simulate 9 (FR) to 25 (PGC-FR) at n =
# 10,000; verify is charged as simulate, beside its own --samples and --max-sets checks
CODE_BYTES_PER_ENTRY = {"train": 160, "simulate": 32, "verify": 32}
TRAIN_VERIFY_S = 10.0      # the verification of a --code file before training
RAY_TIME_SCALE = 0.02      # train --backend ray: real seconds per virtual second
# gradcode study's --steps per training run: a step takes about 1 ms (softmax) to 8 ms (mlp) on
# one core, so 100,000 steps (400x the default) are about 15 min for --quick's 8 runs and most
# of a day for the full study's 192; --steps 40000000 would have run for days, 10^12 died
# allocating 87 TiB
MAX_STUDY_STEPS = 100_000

SCHEME_HELP = listed("training schemes")

_n = typer.Option(None, "--n", help="workers (default: the instance's)")
_s = typer.Option(None, "--s", help="stragglers to tolerate (default: the instance's)")
_instance = typer.Option(None, "--instance", help="gradcode instance name or problem JSON file")
_seed = typer.Option(0, "--seed", min=0, help="seed of the random choices (CR's matrices, delays, weights)")
_decoder = typer.Option(None, "--decoder", help="pgc-cr and approx only: lstsq (least squares) or linear (fixed weights; pgc-cr as published)")
_tries = typer.Option(8, "--tries", help="CR: random H matrices to try (the best conditioned is kept)")
_backend = typer.Option("cpsat", "--solver-backend", help=f"scheme solver: {listed('gradcode exact solvers')}")
_objective = typer.Option("expected", "--objective",
                          help=f"scheme solver: {' or '.join(GRADCODE_OBJECTIVES)} step time")
_limit = typer.Option(30.0, "--time-limit", help="seconds for the scheme solver, and for CR's seed search (--tries)")
_pipelined = typer.Option(False, "--pipelined", help="scheme solver without --instance: one partition per step")
_delay = typer.Option(None, "--delay", help=f"straggler delay model: {listed('straggler models')} "
                                             "(default: the instance's, else exponential)")
_mean = typer.Option(None, "--mean", help="mean extra delay of a straggler (s; default 1)")
_shift = typer.Option(None, "--shift", help="shifted-exponential: fixed part of the delay (s; default 0)")
_scale = typer.Option(None, "--scale", help="pareto: scale (s; default 0.5)")
_alpha = typer.Option(None, "--alpha", help="pareto: shape (default 1.5)")
_stay = typer.Option(None, "--stay", help="markov: probability a straggler stays one (default 0.95)")
_trace = typer.Option(None, "--trace", help="CSV of delays (one row per step, one column per worker)")
_prob = typer.Option(None, "--prob", help="probability a worker straggles in a step (homogeneous; default 0.2)")
_ptime = typer.Option(None, "--partition-time", help="seconds per partition on a speed-1 worker (default 0.5)")
_carry = typer.Option(False, "--carry-over", help="workers as queues: a straggle delays the worker's next steps "
                                                  "(a worker free only after a step was decoded skips it)")
_link = typer.Option(None, "--link-mb-per-s", help="link bandwidth (MB/s) for the weight broadcast and the replies "
                                                   "on the master's shared link (default: communication free)")
_gradient = typer.Option(None, "--gradient-mb", help="size of a gradient (and of the weights), MB (train default: "
                                                     "the model's parameters x 8 bytes)")
_decode = typer.Option(None, "--decode-s-per-reply", help="master's decoding time per reply it combines (s; default 0)")


OPTION_OF = {"kind": "--delay", "mean_s": "--mean", "shift_s": "--shift", "scale_s": "--scale",
             "alpha": "--alpha", "stay": "--stay", "trace_file": "--trace"}


def _straggler_changes(delay, mean, shift, scale, alpha, stay, trace) -> dict:
    """The straggler-model fields the options set (an empty dict: keep the problem's model)."""
    from pipeplan.formulations.gradcode.straggler import load_trace
    changes = {k: v for k, v in (("kind", delay), ("mean_s", mean), ("shift_s", shift), ("scale_s", scale),
                                 ("alpha", alpha), ("stay", stay)) if v is not None}
    if trace is not None:
        changes.update(kind=delay or "trace", trace_file=str(trace), trace=load_trace(trace))
    elif delay == "trace":
        raise InputError("--trace", "", "--delay trace needs --trace FILE")
    return changes


def _problem(instance, n, s, *, straggler=None, prob=None, partition_time=None, pipelined=False, timing=None):
    """The instance (or n homogeneous workers) with the options' overrides; ``straggler`` and
    ``timing`` are dicts of straggler-model and timing fields to change."""
    from pipeplan.formulations.gradcode.problem import homogeneous_problem
    from pipeplan.instances.gradcode import load_instance
    if instance:
        p = load_instance(instance)
        for label, given, have in (("--n", n, p.n), ("--s", s, p.s)):
            if given is not None and given != have:
                raise InputError(label, "", f"{given} differs from the instance's {have}")
    elif n is None or s is None:
        raise InputError("--n", "", "give --n and --s, or --instance")
    else:
        p = homogeneous_problem(n, s, pipelined=pipelined)
    changes = {}
    if straggler:
        try:
            changes["straggler"] = replace(p.straggler, **straggler)
        except InputError as exc:    # name the option that set the field
            raise InputError(OPTION_OF.get(exc.field, "--delay"), "", exc.message) from None
    if partition_time is not None:
        changes["partition_time_s"] = partition_time
    if prob is not None:
        changes["straggle_prob"] = (prob,) * p.n
    changes.update(timing or {})
    try:
        return replace(p, **changes) if changes else p
    except InputError as exc:    # name the option that set a timing field
        option = {"link_mb_per_s": "--link-mb-per-s", "gradient_mb": "--gradient-mb",
                  "decode_s_per_reply": "--decode-s-per-reply", "partition_time_s": "--partition-time"}.get(exc.field)
        if option == "--partition-time" and partition_time is None:
            raise    # the instance's own field
        if option is None:
            raise
        raise InputError(option, "", exc.message) from None


def _timing_changes(carry_over, link, gradient, decode) -> dict:
    """The problem's timing fields the options set."""
    changes = {k: v for k, v in (("link_mb_per_s", link), ("gradient_mb", gradient),
                                 ("decode_s_per_reply", decode)) if v is not None}
    return {"carry_over": True, **changes} if carry_over else changes


def _check_options(prob, partition_time):
    if prob is not None and not 0 <= prob <= 1:
        raise InputError("--prob", "", f"must be in [0, 1], got {prob}")
    if partition_time is not None and not partition_time > 0:
        raise InputError("--partition-time", "", f"must be positive, got {partition_time}")


def _load_code(path: Path, problem=None):
    from pipeplan.core.io import load_json
    from pipeplan.formulations.gradcode.checker import violations
    from pipeplan.formulations.gradcode.gradient_code import code_from_dict
    code = code_from_dict(load_json(path), str(path))
    bad = violations(code, problem)
    if bad:
        raise InputError(str(path), "placement", bad[0] + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""))
    return code


def _make_code(scheme, problem, *, seed, tries, decoder, backend, objective, time_limit, source=None):
    """(code, SolveResult or None) for a named scheme on ``problem`` (read from the file
    ``source``, if any)."""
    import pipeplan
    from pipeplan.core.deadline import Deadline
    from pipeplan.formulations.gradcode.checker import misfits
    from pipeplan.formulations.gradcode.gradient_code import code_from_dict
    from pipeplan.solvers.gradcode.schemes import build
    if scheme == "solver":
        if backend not in ("cpsat", "milp"):
            raise InputError("--solver-backend", "", f"unknown backend {backend!r} (cpsat or milp)")
        if objective not in ("expected", "worst"):
            raise InputError("--objective", "", f"unknown objective {objective!r} (expected or worst)")
        r = pipeplan.solve(problem, backend, time_limit=time_limit, seed=seed, threads=2, objective=objective)
        if r.plan is None:
            raise InputError(problem.name, "solver", f"{r.termination.value}: {r.message}")
        return code_from_dict(r.plan, problem.name), r
    if scheme in ("fr", "gc-fr", "cr", "gc-cr", "pgc-fr", "pgc-cr", "cyclic-mds", "approx") and problem.k != problem.n:
        raise InputError("--scheme", "", f"{scheme} needs k = n partitions (the problem has k = {problem.k}, n = {problem.n})")
    code = build(scheme, problem.n, problem.s, seed=seed, tries=tries, decoder=decoder, deadline=Deadline(time_limit))
    # a named construction knows n and s only: on an instance whose capacities it breaks, it had
    # been written (place) and run (simulate, train) as if the workers could hold it
    faults = misfits(code, problem)
    if faults:
        raise InputError(source or problem.name, "capacity", f"--scheme {scheme} does not fit: {faults[0][1]} "
                                                             "(--scheme solver places within the capacities)")
    return code, None


@app.command("place")
def place_cmd(scheme: str = typer.Option(..., "--scheme", help=SCHEME_HELP), n: Optional[int] = _n,
              s: Optional[int] = _s, instance: Optional[str] = _instance, seed: int = _seed, tries: int = _tries,
              decoder: Optional[str] = _decoder, backend: str = _backend, objective: str = _objective,
              time_limit: float = _limit, pipelined: bool = _pipelined,
              out: Optional[Path] = typer.Option(None, "--out", help="write the code JSON here")):
    """Build a placement: support, encoding matrix B, decoder and (pipelined) per-step schedule."""
    from pipeplan.core.io import write_json
    check_limits(time_limit, seed=seed)
    problem = _problem(instance, n, s, pipelined=pipelined)
    source, field = ("--n", "") if n is not None else (problem.name, "n")
    check_bytes(source, field, f"the code's JSON ({problem.n:,} x {problem.k:,} entries of support and B)",
                problem.n * problem.k * PLACE_BYTES_PER_ENTRY)
    text = problem.n * problem.k * PLACE_TEXT_BYTES_PER_ENTRY
    if text > max_input_bytes():      # FR at n = 10,000 had spent minutes and 5.9 GB writing 800 MB
        raise InputError(source, field, f"the code's JSON would hold about {human_bytes(text)}, above the "
                                        f"{human_bytes(max_input_bytes())} pipeplan reads back (PIPEPLAN_MAX_INPUT_MB)")
    code, result = _make_code(scheme, problem, seed=seed, tries=tries, decoder=decoder, backend=backend,
                              objective=objective, time_limit=time_limit, source=instance)
    doc = code.to_dict()
    doc["instance"] = problem.name
    if result is not None:
        doc["solve"] = {"solver": result.solver, "termination": result.termination.value,
                        "quality": result.quality.value, "objectives": result.objectives, "bound": result.bound,
                        "message": result.message}
    if out:
        write_json(out, doc)
        sched = f", schedule period {code.schedule.shape[0]}" if code.pipelined else ""
        found = ""
        if result is not None:
            o = result.objectives
            found = (f", {result.termination.value}: expected step {o['expected_step_s']:.3f} s, "
                     f"worst case {o.get('worst_step_s', float('inf')):.3f} s")
        typer.echo(f"{code.scheme}: n={code.n} k={code.k} s={code.s}, decoder {code.decoder}{sched}{found} -> {out}")
    else:
        typer.echo(json.dumps(doc))


@app.command("verify")
def verify_cmd(scheme: Optional[str] = typer.Option(None, "--scheme", help=SCHEME_HELP),
               code_file: Optional[Path] = typer.Option(None, "--code", help="a code/placement JSON (place --out)"),
               n: Optional[int] = _n, s: Optional[int] = _s, instance: Optional[str] = _instance,
               seed: int = _seed, tries: int = _tries, decoder: Optional[str] = _decoder,
               samples: int = typer.Option(20_000, "--samples", help="straggler sets to sample past exhaustive"),
               max_sets: int = typer.Option(250_000, "--max-sets", help="most sets to enumerate exhaustively"),
               method: str = typer.Option("auto", "--method", help="auto, exhaustive, structure or sampled "
                                          "(auto: exhaustive up to n = 24, else the code's structure, else sampled)"),
               as_json: bool = typer.Option(False, "--json", help="print the result as one JSON line")):
    """Decode from the straggler sets of size s (every one up to n = 24, else by the code's
    structure or a labelled sample): verdict, worst residual, condition number and decoding
    error. Exit status 1 when some set does not decode exactly."""
    from pipeplan.formulations.gradcode.verifier import METHODS, verify
    if (scheme is None) == (code_file is None):
        raise InputError("verify", "", "give exactly one of --scheme, --code")
    check_limits(None, seed=seed)
    if samples < 1 or max_sets < 1:
        raise InputError("--samples" if samples < 1 else "--max-sets", "", "must be >= 1")
    if method not in METHODS:
        raise InputError("--method", "", f"unknown method {method!r} ({', '.join(METHODS)})")
    if code_file is not None and (instance, n, s) == (None, None, None):
        code = _load_code(code_file)
    elif code_file is not None:       # the code must fit the instance (or --n/--s) given with it
        _, code = _problem_and_code("verify", None, code_file, instance, n, s, None, None, None, seed=seed,
                                    tries=tries, decoder=decoder)
    else:
        problem = _problem(instance, n, s)
        code, _ = _make_code(scheme, problem, seed=seed, tries=tries, decoder=decoder, backend="cpsat",
                             objective="expected", time_limit=30.0, source=instance)
    check_memory("--samples", samples, VERIFY_BYTES_PER_SET_AND_WORKER * code.n)
    if code.n <= 24 or method == "exhaustive":
        check_memory("--max-sets", min(max_sets, math.comb(code.n, code.s)), VERIFY_BYTES_PER_SET_AND_WORKER * code.n)
    began = time.perf_counter()
    try:
        v = verify(code, samples=samples, max_sets=max_sets, seed=seed, method=method)
    except ValueError as exc:          # a forced method that does not apply to this code
        raise InputError("--method", "", str(exc)) from None
    doc = {"scheme": code.scheme, "n": code.n, "k": code.k, "s": code.s, **v.to_dict(),
           "verify_s": round(time.perf_counter() - began, 4)}
    if as_json:
        typer.echo(json.dumps(doc))
    else:
        typer.echo(f"{code.scheme} n={code.n} s={code.s}: {v.verdict}\n"
                   f"  {v.decoder} decoder, {v.sets_checked:,} sets decoded; worst residual {v.worst_residual:.3g}, "
                   f"worst condition {v.worst_condition:.3g}, decoding error worst {v.worst_error:.3g} / mean "
                   f"{v.mean_error:.3g} (||a^T B_F - 1||^2 / k); worst set {list(v.worst_set)}")
    if not v.decodable:
        raise SystemExit(1)   # a check that fails (cli.main would swallow typer.Exit's status)


def _problem_and_code(command: str, scheme, code_file, instance, n, s, straggler, prob, partition_time, *,
                      seed: int, tries: int, decoder, timing=None):
    """The problem and the code of simulate/train: exactly one of --scheme and --code; a code
    file fixes n and s unless an instance or --n/--s say otherwise (then they must agree)."""
    if (scheme is None) == (code_file is None):
        raise InputError(command, "", "give exactly one of --scheme, --code")
    check_limits(None, seed=seed)
    _check_options(prob, partition_time)
    if code_file is not None:
        code = _load_code(code_file)
        n = code.n if n is None and instance is None else n
        s = code.s if s is None and instance is None else s
    problem = _problem(instance, n, s, straggler=straggler, prob=prob, partition_time=partition_time, timing=timing)
    source, field = ("--n", "") if n is not None else (problem.name, "n")
    check_bytes(source, field, f"{command} on a code of {problem.n:,} x {problem.k:,} entries (support and B)",
                problem.n * problem.k * CODE_BYTES_PER_ENTRY[command])
    if code_file is None:
        code, _ = _make_code(scheme, problem, seed=seed, tries=tries, decoder=decoder, backend="cpsat",
                             objective="expected", time_limit=30.0, source=instance)
    else:
        _check_fit(code, code_file, problem, instance)
    return problem, code


def _refuse_undecodable(code, code_file) -> None:
    """A code file trained with must decode: one whose B cannot recover the gradient from some
    straggler set had trained on wrong gradients without a word (FR at n = 6 with one entry of
    B set to 1e-300: a loss of 0.141 after 200 steps where the code reaches 0.129; scaled by
    1e300, 501 after 5 steps). The default verification, stopped after ``TRAIN_VERIFY_S``; a
    code that says it is approximate (the linear decoder) is trained as it is."""
    from pipeplan.core.deadline import Deadline
    from pipeplan.formulations.gradcode.verifier import verify
    v = verify(code, deadline=Deadline(TRAIN_VERIFY_S))
    if not v.decodable and not v.approximate:
        raise InputError(str(code_file), "B", f"not decodable: straggler set {list(v.worst_set)} leaves residual "
                                              f"{v.worst_residual:.3g} (pipeplan gradcode verify --code {code_file})")


def _check_fit(code, code_file, problem, instance) -> None:
    """The code must fit the problem: the same n and s, and with an instance (whose k and
    capacities are real, where --n/--s give n workers of capacity s+1 and k = n) the same k and
    no worker storing more partitions than its capacity. A code of s = 4 storing six partitions
    per worker had run against an instance of s = 1 and capacities 2-3."""
    from pipeplan.formulations.gradcode.checker import misfits
    against = f"the instance {problem.name}" if instance else "--n/--s"
    for field, message in misfits(code, problem):
        if instance or field in ("n", "s"):
            raise InputError(str(code_file), field, f"{message} ({against})")


@app.command("simulate")
def simulate_cmd(scheme: Optional[str] = typer.Option(None, "--scheme", help=SCHEME_HELP),
                 code_file: Optional[Path] = typer.Option(None, "--code", help="a code JSON (place --out)"),
                 n: Optional[int] = _n, s: Optional[int] = _s, instance: Optional[str] = _instance,
                 steps: int = typer.Option(100_000, "--steps", help="steps to simulate"), seed: int = _seed,
                 tries: int = _tries,
                 decoder: Optional[str] = _decoder, delay: Optional[str] = _delay, mean: Optional[float] = _mean,
                 shift: Optional[float] = _shift, scale: Optional[float] = _scale, alpha: Optional[float] = _alpha,
                 stay: Optional[float] = _stay,
                 trace: Optional[Path] = _trace, prob: Optional[float] = _prob,
                 partition_time: Optional[float] = _ptime, carry_over: bool = _carry,
                 link: Optional[float] = _link, gradient: Optional[float] = _gradient,
                 decode_s: Optional[float] = _decode,
                 as_json: bool = typer.Option(False, "--json", help="print the statistics as one JSON line"),
                 out: Optional[Path] = typer.Option(None, "--out", help="write the step-time histogram (CSV) here")):
    """Virtual-time step times (no training) under a straggler model: mean, tail, histogram."""
    import numpy as np

    from pipeplan.formulations.gradcode.simulator import simulate_step_times
    if steps < 1:
        raise InputError("--steps", "", f"must be >= 1, got {steps}")
    check_memory("--steps", steps, SIMULATE_BYTES_PER_STEP)
    straggler = _straggler_changes(delay, mean, shift, scale, alpha, stay, trace)
    problem, code = _problem_and_code("simulate", scheme, code_file, instance, n, s, straggler, prob,
                                      partition_time, seed=seed, tries=tries, decoder=decoder,
                                      timing=_timing_changes(carry_over, link, gradient, decode_s))
    if problem.link_mb_per_s > 0 and problem.gradient_mb <= 0:
        raise InputError("--gradient-mb", "", "simulate needs the gradient size to charge the link (--link-mb-per-s)")
    began = time.perf_counter()
    times = simulate_step_times(problem, code, steps, seed=seed)
    elapsed = time.perf_counter() - began
    p50, p95, p99 = np.percentile(times, [50, 95, 99])
    doc = {"scheme": code.scheme, "instance": problem.name, "n": problem.n, "s": code.s, "steps": steps,
           "straggler": problem.straggler.to_dict(), **problem.timing_dict(), "mean_step_s": float(times.mean()),
           "p50_step_s": float(p50),
           "p95_step_s": float(p95), "p99_step_s": float(p99), "max_step_s": float(times.max()),
           "total_s": float(times.sum()), "simulate_s": round(elapsed, 4)}
    if out:
        from pipeplan.core.io import write_atomic
        counts, edges = np.histogram(times, bins=50)
        rows = "".join(f"{lo:.6g},{hi:.6g},{c}\n" for lo, hi, c in zip(edges[:-1], edges[1:], counts))
        write_atomic(out, "step_s_from,step_s_to,steps\n" + rows)
    if as_json:
        typer.echo(json.dumps(doc))
    else:
        typer.echo(f"{code.scheme} on {problem.name} ({problem.straggler.kind}): {steps} steps, mean "
                   f"{doc['mean_step_s']:.4f} s, p50 {p50:.4f}, p95 {p95:.4f}, p99 {p99:.4f} s "
                   f"(simulated in {elapsed:.2f} s)")


@app.command("train")
def train_cmd(scheme: Optional[str] = typer.Option(None, "--scheme", help=SCHEME_HELP),
              code_file: Optional[Path] = typer.Option(None, "--code", help="a code JSON (place --out)"),
              backend: str = typer.Option("sim", "--backend", help="sim (virtual time) or ray (actors)"),
              n: Optional[int] = _n, s: Optional[int] = _s, instance: Optional[str] = _instance,
              model: str = typer.Option("softmax", "--model", help=f"model: {listed('gradcode models')}"),
              steps: int = typer.Option(200, "--steps", help="training steps"),
              lr: Optional[float] = typer.Option(None, "--lr", help="learning rate, > 0 (default per model: "
                                                 f"{listed('default lr')})"),
              seed: int = _seed, tries: int = _tries, decoder: Optional[str] = _decoder,
              delay: Optional[str] = _delay, mean: Optional[float] = _mean, shift: Optional[float] = _shift,
              scale: Optional[float] = _scale, alpha: Optional[float] = _alpha, stay: Optional[float] = _stay, trace: Optional[Path] = _trace,
              prob: Optional[float] = _prob, partition_time: Optional[float] = _ptime,
              carry_over: bool = _carry, link: Optional[float] = _link, gradient: Optional[float] = _gradient,
              decode_s: Optional[float] = _decode,
              time_scale: Optional[float] = typer.Option(None, "--time-scale",
                                                         help=f"ray: real seconds per virtual second "
                                                              f"(default {RAY_TIME_SCALE})"),
              target_loss: Optional[float] = typer.Option(None, "--target-loss",
                                                          help="training loss to reach: also report the virtual "
                                                               "time and steps until the loss first gets there"),
              out: Optional[Path] = typer.Option(None, "--out", help="write the run (loss and time per step) here")):
    """Train softmax regression or an MLP on the digits with a scheme's stale-gradient updates."""
    from pipeplan.core.io import write_json
    from pipeplan.deploy.gradcode.models import MODELS
    if backend not in ("sim", "ray"):
        raise InputError("--backend", "", f"unknown backend {backend!r} (sim or ray)")
    if model not in MODELS:
        raise InputError("--model", "", f"unknown model {model!r} ({', '.join(MODELS)})")
    if time_scale is not None and backend != "ray":     # had been ignored without a word
        raise InputError("--time-scale", "", "is for --backend ray (the sim backend runs in virtual time)")
    time_scale = RAY_TIME_SCALE if time_scale is None else time_scale
    if steps < 1 or (lr is not None and not lr > 0) or not time_scale >= 0:
        raise InputError("--steps" if steps < 1 else "--lr" if lr is not None and not lr > 0 else "--time-scale",
                         "", "must be positive")
    for option, value in (("--lr", lr), ("--time-scale", time_scale), ("--target-loss", target_loss)):
        if value is not None and not math.isfinite(value):     # --lr inf trained to a NaN loss, exit 0
            raise InputError(option, "", f"must be a finite number, got {value}")
    straggler = _straggler_changes(delay, mean, shift, scale, alpha, stay, trace)
    problem, code = _problem_and_code("train", scheme, code_file, instance, n, s, straggler, prob, partition_time,
                                      seed=seed, tries=tries,
                                      decoder=decoder or ("linear" if scheme == "pgc-cr" else None),
                                      timing=_timing_changes(carry_over, link, gradient, decode_s))
    if backend == "ray" and problem.timing_dict():
        raise InputError("--backend", "", "the timing options (--carry-over, --link-mb-per-s, ...) are for --backend sim")
    check_memory("--steps", steps, TRAIN_BYTES_PER_STEP + 8 * problem.n)
    if code_file is not None:
        _refuse_undecodable(code, code_file)
    from pipeplan.deploy.gradcode.training import DEFAULT_LR, Diverged
    try:
        if backend == "ray":
            try:
                import ray  # noqa: F401
            except ImportError:
                raise InputError("--backend", "", "ray is not installed (pip install 'pipeplan[ray]')") from None
            from pipeplan.deploy.gradcode.ray_backend import train_ray
            with _progress(f"train {code.scheme} on ray") as progress:
                run = train_ray(problem, code, model=model, steps=steps, lr=lr, seed=seed, time_scale=time_scale,
                                progress=progress)
        else:
            from pipeplan.deploy.gradcode.training import train_simulated
            with _progress(f"train {code.scheme}") as progress:
                run = train_simulated(problem, code, model=model, steps=steps, lr=lr, seed=seed, progress=progress)
    except Diverged as exc:          # a learning rate far too large: no NaN summary with exit 0
        raise InputError("--lr", "", f"{exc}; lower --lr ({model}'s default is {DEFAULT_LR[model]:g})") from None
    summary = {"scheme": run.scheme, "backend": run.backend, "model": model, "n": run.n, "s": problem.s,
               "steps": steps, "final_loss": run.loss[-1], "virtual_time_s": run.time_s[-1],
               "test_accuracy": run.test_accuracy, "wall_s": round(run.wall_s, 3), **problem.timing_dict()}
    if problem.carry_over:
        summary["skipped_work"] = run.skipped_work
    if backend == "ray":
        summary["dropped_replies"] = run.dropped_replies
    if target_loss is not None:
        summary["target_loss"] = target_loss
        summary["time_to_target_s"] = run.time_to_loss(target_loss)
        summary["steps_to_target"] = run.steps_to_loss(target_loss)
    if out:
        write_json(out, {**run.to_dict(), "summary": summary, "instance": problem.name})
    typer.echo(json.dumps(summary))


@app.command("study")
def study_cmd(out: Path = typer.Option(Path("results/gradcode"), "--out", help="folder of the study's tables and plots"),
              steps: int = typer.Option(250, "--steps", help="training steps per run"),
              models: str = typer.Option("softmax,mlp", "--models", help=f"comma list of: {listed('gradcode models')}"),
              time_limit: float = typer.Option(60.0, "--time-limit", help="seconds per assignment solve"),
              quick: bool = typer.Option(False, "--quick", help="softmax only, s = 2, delay mean 1 s; short solves")):
    """Write results/gradcode/: time to target loss, loss-vs-time plots, solver vs FR/CR, timings."""
    from pipeplan.app.studies.gradcode import run_study
    from pipeplan.deploy.gradcode.models import MODELS
    chosen = name_list("--models", models)
    for m in chosen:
        if m not in MODELS:
            raise InputError("--models", "", f"unknown model {m!r} ({', '.join(MODELS)})")
    if steps < 10:
        raise InputError("--steps", "", f"need at least 10 steps, got {steps}")
    from pipeplan.app.studies.gradcode import FILES, STUDY_N, STUDY_SCHEMES
    # a setting's runs of every scheme are kept for its plot (the timing study's one at a time)
    check_memory("--steps", steps, len(STUDY_SCHEMES) * (TRAIN_BYTES_PER_STEP + 8 * STUDY_N))
    if steps > MAX_STUDY_STEPS:
        raise InputError("--steps", "", f"at most {MAX_STUDY_STEPS:,} training steps per run, got {steps:,} (a run "
                         "trains about 1,000 steps a second, and the study makes 8 runs with --quick, 192 without)")
    check_limits(time_limit)
    with staged_folder(out, writes=FILES) as stage, \
            _progress("gradcode study") as progress:
        md = run_study(stage, steps=steps, models=chosen, time_limit=time_limit, quick=quick, progress=progress,
                       command=command_text("pipeplan gradcode study"))
    typer.echo(md)
