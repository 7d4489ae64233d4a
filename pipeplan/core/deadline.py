"""One clock for every solver's time limit.

A time limit covers the whole solve: building the model, warm starts, seeding and every solver
call. Builders and loops call :meth:`Deadline.check` at least once per unit of work that can
take noticeable time (per unit, per edge batch, per generation); past the deadline it raises
:class:`OutOfTime` and the solver returns the best plan it has (the cheapest heuristic if
nothing else) with termination ``time_limit``.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
import weakref
from contextlib import suppress

from pipeplan.core.errors import Terminated


class OutOfTime(Exception):
    """The time limit passed during a phase that cannot return a partial answer."""


class Deadline:
    """A point in time ``seconds`` after creation (never, when ``seconds`` is None)."""

    def __init__(self, seconds: float | None):
        self.began = time.perf_counter()
        self.limit = None if seconds is None else float(seconds)
        self.at = None if seconds is None else self.began + float(seconds)

    def elapsed(self) -> float:
        return time.perf_counter() - self.began

    def remaining(self, floor: float = 0.0) -> float | None:
        """Seconds left (at least ``floor``), or None without a limit."""
        if self.at is None:
            return None
        return max(floor, self.at - time.perf_counter())

    def expired(self) -> bool:
        check_stop()
        return self.at is not None and time.perf_counter() >= self.at

    def check(self) -> None:
        if self.expired():
            raise OutOfTime


GRACE_S = 1.0   # how long past its own time limit a guarded call may run before it is stopped
# The default --time-limit of the commands that run a user's ONNX model on ONNX Runtime (profile,
# instance, export's batch-norm calibration, run): far above a real run (200 frames of vgg19 and
# their reference check take minutes on a laptop), yet a bound on a model that never ends.
MODEL_RUN_LIMIT_S = 3600.0


_WAITED_ON: set = set()    # the children run_within is waiting on now, from any thread
_NATIVE: weakref.WeakSet = weakref.WeakSet()    # native solvers a stop must interrupt (each has StopSearch)
_stopping: int | None = None    # the exit status asked for by ``stop``
_watching: int | None = None    # the process whose signals watch_signals watches


def stop(status: int) -> None:
    """For a process asked to stop (SIGTERM, ``app.cli.main``): kill every child
    :func:`run_within` waits on, in any thread, and start no more (each call returns None at
    once), so the exit does not wait out a MILP's time limit (stopping ``rollout optimum-gaps``
    during the step-indexed bound took 43 s before: lsat-ar R = 16, a 60 s MILP); and from now
    on every :meth:`Deadline.expired` (so every solver loop) and :func:`check_stop` raise
    :class:`Terminated`. Why again: the handler's own exception can be raised inside a
    ``__del__`` or a weakref callback, where Python prints and drops it; a bench then went on
    starting runs (1 of 12 SIGTERMs in tests)."""
    global _stopping
    _stopping = status
    interrupt_native()
    for process in list(_WAITED_ON):
        with suppress(Exception):
            process.kill()


def stoppable(solver):
    """``solver`` (a CpSolver), made to end its search when the process is asked to stop. A
    Python signal handler runs only between bytecodes, so a SIGTERM had waited out the whole
    solve (a rollout CP-SAT at a 1e308 s limit: still running 11 minutes after it), and CP-SAT's
    own SIGINT handler took Ctrl-C for itself (the solve stopped and the command went on to exit
    0, or the process died by SIGINT with its temporary folders left). In a process that
    :func:`watch_signals` watches (the CLI), that handler is off and the watcher stops the
    search; elsewhere (the library in a user's program) CP-SAT keeps its own."""
    if _watching == os.getpid():
        solver.parameters.catch_sigint_signal = False
    _NATIVE.add(solver)
    return solver


class _HighsStop:
    """A HiGHS solve as :func:`interrupt_native` sees a CP-SAT one."""

    def __init__(self, highs):
        self.highs = highs

    def StopSearch(self) -> None:       # noqa: N802 (CP-SAT's name)
        self.highs.cancelSolve()


def stoppable_highs(highs):
    """``highs`` (a ``highspy.Highs``), made to end its solve when the process is asked to stop,
    as :func:`stoppable` does for CP-SAT. highspy honours ``cancelSolve`` only with its user
    interrupt on (off, a SIGTERM had waited out an in-process MILP's time limit: 6-9 s in
    ``gradcode study --quick``); the interrupt costs nothing measurable (a 3,000-node MILP:
    5.5-5.7 s either way)."""
    highs.HandleUserInterrupt = True
    highs.pipeplan_stop = _HighsStop(highs)     # kept alive as long as the solve's object
    _NATIVE.add(highs.pipeplan_stop)
    return highs


def watch_signals() -> None:
    """Start (once a process) a thread that wakes on SIGTERM and SIGINT while the main thread
    sits in a native solve, where Python runs no handler until it returns, and stops that solve
    (:func:`interrupt_native`): the handler then runs at once. Call from the main thread. A
    process forked from this one drops the wakeup pipe, whose watcher lives only here."""
    global _watching
    if _watching == os.getpid():        # once a process (the tests call the CLI's main many times)
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    if _watching is None:
        os.register_at_fork(after_in_child=_drop_wakeup_fd)
    _watching = os.getpid()

    def watch() -> None:
        while data := os.read(read_end, 64):
            if signal.SIGTERM in data or signal.SIGINT in data:
                interrupt_native()
    threading.Thread(target=watch, name="pipeplan-signals", daemon=True).start()


def _drop_wakeup_fd() -> None:
    with suppress(ValueError):      # not the child's main thread: nothing was set there
        signal.set_wakeup_fd(-1)


def interrupt_native() -> None:
    """Stop the search of every registered solver, from any thread: each Solve then returns at
    once, and the Python handler (SIGTERM) or KeyboardInterrupt (Ctrl-C) runs after it."""
    for solver in list(_NATIVE):
        with suppress(Exception):
            solver.StopSearch()


def stop_status() -> int | None:
    """The exit status :func:`stop` was called with, or None."""
    return _stopping


def check_stop() -> None:
    """Raise :class:`Terminated` once :func:`stop` was called."""
    if _stopping is not None:
        raise Terminated(_stopping)


def run_within(work, seconds: float, grace: float = GRACE_S, memory_bytes: int | None = None):
    """``work()``'s result, computed in a forked child process that is killed when it runs
    ``grace`` seconds past ``seconds``; None then (or when the child dies). An exception
    ``work`` raises is raised here. With ``memory_bytes``, the child's address space may grow
    by at most that much (:func:`_limit_growth`): an allocation past it fails there
    (``MemoryError`` in Python, or the child dies), never in this process.

    Why a process. A native solver can loop past its own time limit where no interrupt reaches
    it: HiGHS 1.16's MIP search did so on a 44-bucket step-bound model of a five-request round
    (time_limit 5 s, still running after 120 s, ``cancelSolve`` ignored). Only killing the
    process holds the caller's limit. ``work`` runs on a copy of the caller's memory; its
    result must pickle."""
    import multiprocessing as mp

    if _stopping is not None:
        return None
    ctx = mp.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)

    def child():
        try:
            if memory_bytes is not None:
                _limit_growth(memory_bytes)
            send.send((True, work()))
        except Exception as err:       # noqa: BLE001 (raised again in the parent)
            send.send((False, err))
        finally:
            send.close()

    highs = sys.modules.get("highspy")
    if highs is not None:
        # a forked child inherits none of the parent's threads: once the parent has run HiGHS
        # (an LP of energy_ceiling, a PuLP model), its task executor would hang the child's
        # solve (the step bound then came back 0); shut down, it starts afresh in the child
        highs.Highs.resetGlobalScheduler(True)
    process = ctx.Process(target=child, daemon=True)
    process.start()
    _WAITED_ON.add(process)
    send.close()
    try:
        answer = receive.recv() if receive.poll(max(0.0, seconds) + grace) else None
    except EOFError:                   # the child died without an answer
        answer = None
    finally:
        _WAITED_ON.discard(process)
        receive.close()
        if process.is_alive():
            process.kill()
        process.join()
    if answer is None:
        return None
    done, value = answer
    if not done:
        raise value
    return value


def _limit_growth(memory_bytes: int) -> None:
    """Let this process's address space grow by at most ``memory_bytes`` (RLIMIT_AS). Counted
    from its size now: a forked child starts with its parent's mappings (libraries, ONNX
    Runtime's arena, a model's weights), which are shared, not new."""
    import os
    import resource

    with open("/proc/self/statm") as f:
        size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    soft = size + memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
