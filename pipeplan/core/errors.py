"""Errors that the CLI turns into one-line messages with exit status 2.

Every loader raises :class:`InputError` naming the file and the field that is wrong, so a user
sees ``error: profiles/x.json: time_ms.G[3]: negative time -1.0`` instead of a traceback.
"""
from __future__ import annotations

import re
import traceback
from pathlib import Path

# What a terminal acts on: C0 controls but the tab, DEL, the C1 block (CSI, NEL, ...) and the
# bidirectional overrides and isolates (a name can reorder what is shown after it).
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
TERMINAL_CONTROLS = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")
# What a name may not hold: the same, and the tab and every line break (U+2028 and U+2029 too).
NAME_CONTROLS = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}\u2028\u2029]")


def single_line(text: str) -> str:
    """``text`` on one line: every line break Python's ``splitlines`` knows (``\\r``, ``\\v``,
    U+2028, ...), not only ``\\n``, becomes a space (a DVFS level named ``"max\\rX"`` had split
    the one-line error in two), and every other terminal control is written as its escape: a
    plan's key holding ESC[2J had cleared the user's screen from inside an error line."""
    return TERMINAL_CONTROLS.sub(lambda m: m[0].encode("unicode_escape").decode(), " ".join(text.splitlines()))


MAX_FIELD_CHARS = 200       # of an error's field: a field may hold a key of the user's file
MAX_MESSAGE_CHARS = 600     # of its message: the longest the project's own messages reach is about 400


def cut_text(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, saying how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


class InputError(ValueError):
    """Bad user input: a file, a field in it, and what is wrong. Its line is cut to a readable
    length whatever it quotes: a 20,000-character DVFS level or schema had made 20 KB lines."""

    def __init__(self, source: str, field: str, message: str):
        self.source = str(source)
        self.field = field
        self.message = message
        super().__init__(self.one_line())

    def __reduce__(self):
        """Pickled as its three parts: a worker process's InputError had reached its pool's parent
        as a TypeError in the result thread, which then hung (``rollout regimes``)."""
        return type(self), (self.source, self.field, self.message)

    def one_line(self) -> str:
        field = cut_text(self.field, MAX_FIELD_CHARS)
        where = f"{self.source}: {field}" if field else self.source
        return single_line(f"{where}: {cut_text(self.message, MAX_MESSAGE_CHARS)}")


class SolverFailure(RuntimeError):
    """A solver failed where the command has no result to carry the failure (an exact Pareto
    sweep): the CLI prints one line and exits with status 1."""

    def __init__(self, what: str, message: str):
        self.what = what
        self.message = message
        super().__init__(self.one_line())

    def __reduce__(self):       # as InputError's: a worker's failure must reach its pool's parent
        return type(self), (self.what, self.message)

    def one_line(self) -> str:
        return single_line(f"{self.what}: {self.message}")


def crash_message(exc: BaseException) -> str:
    """One line for a solver's or a run's exception, kept in its result: the exception and the
    line that raised it (``ValueError: ... | at variants.py:104 in combinations``)."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" | at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}".replace("\n", " ")


def brief_error(exc: BaseException, limit: int = 200) -> str:
    """The first line of an error message, at most ``limit`` characters, for a one-line error
    that quotes a library's (ONNX, ONNX Runtime) message."""
    text = str(exc).strip().splitlines()
    return text[0][:limit] if text else type(exc).__name__


def brief_value(value, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters, for quoting a bad value in a one-line error
    (a JSON integer of 400 digits is one value)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


class Terminated(SystemExit):
    """The process was asked to stop (SIGTERM; exit status 128 + the signal's number): raised in
    the main thread by the CLI's handler, and again at the next ``core.deadline`` check if the
    first was swallowed (``core.deadline.stop``)."""
