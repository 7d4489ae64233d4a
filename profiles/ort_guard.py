"""Running an untrusted ONNX model on ONNX Runtime within bounds of memory and time.

What shape inference can bound is refused before a session exists
(:func:`~pipeplan.formulations.mapping.onnx_bounds.check_model_bounds`); this module bounds
what only the run decides:

* **Memory.** :func:`cap_memory` makes a session allocate from one CPU arena shared by every
  session of the process, whose size is capped at the memory cap (``PIPEPLAN_MAX_MEMORY_MB``,
  else half the machine's memory, :mod:`pipeplan.core.sizes`; read once, at the first session),
  less what the caller holds itself (:func:`reserve_outside_arena`: ``run``'s input frames).
  An allocation past the cap fails inside ONNX Runtime, which raises an error: a tensor whose
  size follows from the input's values (``ConstantOfShape`` of a computed shape) is refused
  without being allocated.
* **Time.** ONNX Runtime checks ``RunOptions.terminate`` between kernels, also inside a Loop.
  :class:`RunGuard` sets it for every call made through it, at its deadline or on
  :meth:`RunGuard.stop`. While ONNX Runtime computes on the main thread, no signal handler
  runs there (a Loop of 2^62 steps had ignored SIGTERM and Ctrl-C until SIGKILL), so the main
  thread calls :meth:`RunGuard.run_stoppable`, which computes on a helper thread and waits.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnxruntime as ort

from pipeplan.core.errors import InputError
from pipeplan.core.sizes import memory_cap_bytes

_ARENA_LOCK = threading.Lock()
_arena_bytes: list[int] = []     # the cap of the registered arena, once it exists
_reserved_bytes: list[int] = [0]  # the part of the memory cap the arena leaves to the caller's own arrays
MIN_ARENA_BYTES = 1 << 20
_POLL_S = 0.1


def reserve_outside_arena(nbytes: int) -> None:
    """Leave ``nbytes`` of the memory cap out of the arena, for what the caller holds in arrays
    of its own (``run``'s input frames, which ONNX Runtime only reads), so that the two together
    stay within the cap. The largest reservation made before the first session counts: the
    arena is made once per process."""
    with _ARENA_LOCK:
        _reserved_bytes[0] = max(_reserved_bytes[0], int(nbytes))


def cap_memory(options: ort.SessionOptions) -> None:
    """Make sessions built with ``options`` allocate from the capped shared arena: the memory cap
    less what :func:`reserve_outside_arena` reserved."""
    with _ARENA_LOCK:
        if not _arena_bytes:
            cap = max(memory_cap_bytes() - _reserved_bytes[0], MIN_ARENA_BYTES)
            info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
            # strategy 1 (kSameAsRequested): grow by what is asked, so the cap is reached only by real need
            ort.create_and_register_allocator(info, ort.OrtArenaCfg({"max_mem": cap, "arena_extend_strategy": 1}))
            _arena_bytes.append(cap)
    options.add_session_config_entry("session.use_env_allocators", "1")


def session_options(threads: int) -> ort.SessionOptions:
    """What every pipeplan session shares: ``threads`` intra-op threads and one inter-op thread,
    ORT's own log silenced to fatal (a failing model is one error line, not ORT's log too), and
    allocation from the capped arena (:func:`cap_memory`)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 4
    cap_memory(options)
    return options


class RunGuard:
    """ONNX Runtime calls that stop together: at ``time_limit_s`` after the guard was made (None:
    no limit), when :meth:`stop` is called, or when the main thread is interrupted in
    :meth:`wait`. ``option`` is what the time-limit error names (the command's option)."""

    def __init__(self, time_limit_s: float | None = None, option: str = "--time-limit", *,
                 began: float | None = None):
        """``began``: the ``time.monotonic()`` the limit counts from, when the command did work
        under it before this guard was made (a joint run that loaded its networks first); now
        by default."""
        self.time_limit_s, self.option = time_limit_s, option
        start = time.monotonic() if began is None else began
        self._deadline = None if time_limit_s is None else start + time_limit_s
        self._lock = threading.Lock()
        self._running: set[ort.RunOptions] = set()
        self._stopped = False
        self.timed_out = False

    def run(self, session: ort.InferenceSession, outputs: Sequence[str] | None,
            feeds: dict[str, np.ndarray]) -> list[Any]:
        """``session.run`` on the calling thread, stopped by :meth:`stop` like every other, and
        not started past the deadline: the waiting thread checks it only while a call runs
        longer than its poll, so calls shorter than that had run on past the limit
        (``profile inception_v1 --runs 20 --time-limit 0.5`` took 3 s and exited 0)."""
        self.check_deadline()
        options = ort.RunOptions()
        with self._lock:
            options.terminate = self._stopped
            self._running.add(options)
        try:
            return session.run(outputs, feeds, options)
        finally:
            with self._lock:
                self._running.discard(options)

    def run_stoppable(self, session: ort.InferenceSession, outputs: Sequence[str] | None,
                      feeds: dict[str, np.ndarray]) -> list[Any]:
        """:meth:`run` on a helper thread while this one waits (:meth:`wait`): for the main
        thread, so that Ctrl-C and SIGTERM reach it while ONNX Runtime computes."""
        result: list[list[Any]] = []
        failure: list[BaseException] = []
        done = threading.Event()

        def target() -> None:
            try:
                result.append(self.run(session, outputs, feeds))
            except BaseException as exc:  # noqa: BLE001  (handed to the waiting thread)
                failure.append(exc)
            finally:
                done.set()

        threading.Thread(target=target, name="pipeplan-ort-run", daemon=True).start()
        try:
            self.wait(done)
        except BaseException:
            done.wait(2.0)   # ORT checks the flag between kernels; a daemon thread ends with the process
            raise
        if failure:
            raise failure[0]
        return result[0]

    def wait(self, done: threading.Event) -> None:
        """Wait until ``done`` is set, stopping every call once the deadline passes. If this
        thread is interrupted (a signal's exception), stop every call and re-raise."""
        try:
            while not done.wait(_POLL_S):
                self.check_deadline()
        except BaseException:
            self.stop()
            raise

    def check_deadline(self) -> None:
        if self._deadline is not None and not self.timed_out and time.monotonic() > self._deadline:
            self.timed_out = True
            self.stop()

    def stop(self) -> None:
        """Ask every call made through the guard, running or still to come, to end."""
        with self._lock:
            self._stopped = True
            for options in self._running:
                options.terminate = True

    def time_left(self) -> float:
        """Seconds to the deadline (negative past it; infinite without a limit)."""
        return float("inf") if self._deadline is None else self._deadline - time.monotonic()

    def check_time_limit(self, source: str) -> None:
        """Raise the time-limit error (naming ``source``, what was running) if the deadline
        stopped the calls; for the callers' handlers of what a stopped call raised."""
        if self.timed_out:
            raise self._time_limit_error(f"ONNX Runtime was still running {source}") from None

    def check_time_left(self, doing: str) -> None:
        """Raise the time-limit error at once if the deadline has passed, saying what was still
        being done (``doing``: "loading the export EXPORT (...)"): for the work between
        ONNX Runtime calls that no ``RunOptions.terminate`` stops (loading an export, creating
        its sessions), checked between its steps. Every call still running is stopped too."""
        self.check_deadline()
        if self.timed_out:
            raise self._time_limit_error(f"pipeplan was still {doing}") from None

    def _time_limit_error(self, what: str) -> InputError:
        return InputError(self.option, "", f"{what} after {self.time_limit_s:g} s; "
                          f"stopped (give a larger {self.option} for a model that needs longer)")
