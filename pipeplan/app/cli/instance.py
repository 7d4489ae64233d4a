"""``pipeplan instance``: your own ONNX model as a mapping instance file, ready for solve,
compare, pareto and export."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from pipeplan.app.cli.common import progress as _progress
from pipeplan.core.api import check_limits
from pipeplan.core.deadline import MODEL_RUN_LIMIT_S


def instance_cmd(model: str = typer.Argument(..., help="ONNX file, or a model of the onnx wheel (e.g. squeezenet)"),
                 out: Path = typer.Option(..., "--out", help="instance JSON to write (pipeplan.mapping-instance/1, "
                                                             "profile inline; its name is this path)"),
                 profile: Optional[Path] = typer.Option(None, "--profile", help="profile JSON of this model "
                                                        "(`pipeplan profile`); default: measure this host now"),
                 platform: Optional[str] = typer.Option(None, "--platform", help="platform file or name (a311d, bst):"
                                                        " the roofline estimate instead of a measured profile"),
                 runs: int = typer.Option(10, "--runs", min=1, help="timed runs when measuring this host"),
                 warmup: int = typer.Option(3, "--warmup", min=0, help="untimed runs before them"),
                 time_limit: float = typer.Option(MODEL_RUN_LIMIT_S, "--time-limit",
                                                  help="seconds the profiling runs on this host may take; "
                                                       "ONNX Runtime is stopped there")):
    """Make a mapping instance from an ONNX model and a profile (measured on this host by default)."""
    from pipeplan.core.io import check_output, read_input, write_json
    from pipeplan.formulations.mapping.onnx_graph import model_path
    from pipeplan.instances.from_model import check_instance_path, model_instance

    check_limits(time_limit)
    read_input(model_path(model), what="ONNX model")     # refuse a bad output before profiling
    if profile is not None:
        read_input(profile, what="profile")
    check_output(out)
    check_instance_path(out, "--out")
    with _progress(f"instance {Path(model).name}") as progress:
        problem = model_instance(model, name=str(out), profile=profile, platform=platform, runs=runs, warmup=warmup,
                                 progress=progress, time_limit_s=time_limit)
    write_json(out, problem.to_dict())
    kinds = ", ".join(f"{n} ({pu.kind})" for n, pu in problem.profile.pus.items())
    typer.echo(f"{len(problem.units)} units, {len(problem.edges)} edges; PUs {kinds}; {problem.source} -> {out}")
    typer.echo(f"next: pipeplan solve {out} --solver pipeline-dp --out plan.json")
