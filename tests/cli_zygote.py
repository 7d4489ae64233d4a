"""A pre-imported parent for the CLI runs of the tests (``tests.cli_helpers.run_cli``).

Each ``pipeplan`` run of the suite used to start a fresh interpreter and import numpy, SciPy,
OR-Tools, HiGHS, ONNX and the package again: 0.5-0.8 s of the run's 0.6-0.9 s, about 300 times
per suite. This module, run as a process (``python -m tests.cli_zygote``), imports all that once
and forks one child per run. The child is a separate process as a user's run is: it takes the
run's working folder, environment, arguments and standard streams (files, not the tests'
pipes), runs the CLI's ``main()`` as ``python -m pipeplan.app.cli`` does, with its program name,
and exits with its status; a traceback goes to its stderr and exit status 1, as Python's own
exit does. Only the interpreter start and the imports are shared. ``PIPEPLAN_TESTS_FRESH_CLI=1``
makes ``run_cli`` start a fresh interpreter per run instead, to compare.

Protocol (one line of JSON per request on stdin; on stdout a line with the child's pid, then
one with its exit status, negative for a signal as ``subprocess`` reports it)."""
from __future__ import annotations

import atexit
import importlib
import json
import os
import pkgutil
import sys
import threading
import traceback

# the libraries the commands import lazily, then every module of the package but the Ray engine
# (importing Ray starts nothing, but it is large and no bad-input run reaches it)
LIBRARIES = ("numpy", "scipy.sparse", "networkx", "onnx", "onnxruntime", "ortools.sat.python.cp_model", "highspy",
             "pulp", "matplotlib.pyplot", "pymoo.algorithms.moo.nsga2", "typer", "rich.console")


def _preload() -> None:
    import matplotlib
    matplotlib.use("Agg")
    for name in LIBRARIES:
        importlib.import_module(name)
    import pipeplan
    for info in pkgutil.walk_packages(pipeplan.__path__, "pipeplan."):
        if "ray" in info.name.split(".")[-1] or info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except ImportError:                # an optional extra not installed: the run imports it itself
            pass


def _child(request: dict) -> int:
    """Run the CLI in this (forked) process; its exit status."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for fd, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
    import pipeplan.app.cli as package
    from pipeplan.app.cli.main import main

    # what `python -m pipeplan.app.cli` sets, so click names the program as it does there
    sys.argv = [os.path.join(os.path.dirname(package.__file__), "__main__.py"), *request["args"]]
    sys.modules["__main__"].__package__ = "pipeplan.app.cli"
    try:
        main()
        status = 0
    except SystemExit as done:
        code = done.code
        if code is None or isinstance(code, int):
            status = code or 0
        else:
            print(code, file=sys.stderr)
            status = 1
    except BaseException:                  # noqa: BLE001 (Python prints it and exits 1)
        traceback.print_exc()
        status = 1
    threading._shutdown()                  # as the interpreter's exit: join threads, then atexit
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return status


def serve() -> None:
    _preload()
    requests, answers = sys.stdin, sys.stdout
    for line in requests:
        request = json.loads(line)
        answers.flush()
        pid = os.fork()
        if pid == 0:
            try:
                status = _child(request)
            except BaseException:          # noqa: BLE001 (a broken request: the test sees it on stderr)
                traceback.print_exc()
                status = 1
            os._exit(status)
        answers.write(f"{pid}\n")
        answers.flush()
        _, wait = os.waitpid(pid, 0)
        status = os.waitstatus_to_exitcode(wait)
        answers.write(f"{status}\n")
        answers.flush()


if __name__ == "__main__":
    serve()
