"""File helpers every loader and writer goes through.

Reading: :func:`read_input` opens a user's file without following it into a FIFO, device or
folder, refuses files above the size cap and remembers every file it read (so no command writes its
output over one of its own inputs); :func:`load_text`, :func:`load_json`, :func:`load_toml`,
:func:`read_csv` (:func:`parse_csv`) and :func:`parse_number` build on it and turn every fault (bad encoding, too
deep nesting (caught as the parser's RecursionError), a field past the csv limit, NaN or overflowing numbers) into one
:class:`InputError` naming the file and the line or field.

Writing: :func:`write_atomic` (temp file, then rename) and :func:`staged_folder` (every file of
a command appears together, or none does) refuse outputs that are symlinks, folders, devices,
FIFOs or one of the command's inputs, before anything is written. An ``--out`` folder that a
command writes fixed file names into (report.md, compare.md, ...) must be new, empty or one
pipeplan wrote (:func:`check_out_folder`: it holds the marker file ``OUT_MARKER``, which every
such command leaves there); a folder of the user's own is refused, not overwritten.

Size cap: ``PIPEPLAN_MAX_INPUT_MB`` (default 512 MiB) for any single input file.
"""
from __future__ import annotations

import csv
import io
import json
import math
import numbers
import os
import re
import shutil
import stat
import sys
import tempfile
import tomllib
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from pipeplan.core.deadline import check_stop
from pipeplan.core.errors import NAME_CONTROLS, InputError, brief_value
from pipeplan.core.sizes import bytes_from_env, check_bytes

DEFAULT_MAX_INPUT_MB = 512
# (device, inode, mtime) of every file read by this process: the mtime keeps an inode that the
# file system reuses for a new file, in a long-running process, from passing for an old input
_INPUTS: set[tuple[int, int, int]] = set()


def max_input_bytes() -> int:
    """The input size cap: ``PIPEPLAN_MAX_INPUT_MB`` (a positive number of MiB) or 512 MiB."""
    cap = bytes_from_env("PIPEPLAN_MAX_INPUT_MB")
    return DEFAULT_MAX_INPUT_MB << 20 if cap is None else cap


def _kind(mode: int) -> str:
    return ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")


def _identity(st: os.stat_result) -> tuple[int, int, int]:
    return st.st_dev, st.st_ino, st.st_mtime_ns


def read_input(path: str | Path, *, what: str = "file") -> bytes:
    """The bytes of a user's regular file, at most the size cap. Opened non-blocking and checked
    on the open descriptor, so a FIFO or device never hangs the command and a file swapped
    between check and read is still checked."""
    path = Path(path)
    cap = max_input_bytes()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except IsADirectoryError:
        raise InputError(str(path), "", f"is a folder, expected a {what}") from None
    except OSError as exc:
        raise InputError(str(path), "", f"cannot read {what} ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(str(path), "", f"is {_kind(st.st_mode)}, expected a {what}")
        if st.st_size > cap:
            raise InputError(str(path), "", f"{st.st_size} bytes is above the input size cap of {cap} bytes "
                                            "(raise it with PIPEPLAN_MAX_INPUT_MB)")
        chunks, total = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:
                raise InputError(str(path), "", f"grew past the input size cap of {cap} bytes while read")
        _INPUTS.add(_identity(st))
        return b"".join(chunks)
    except OSError as exc:
        raise InputError(str(path), "", f"cannot read {what} ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def inside_folder(folder: str | Path, name: Any, source: str, field: str) -> Path:
    """``folder / name`` with every link followed, refused unless it lies inside ``folder``.
    Checked before the file is opened, so a name from an untrusted folder ('../x', an absolute
    path, a link pointing out) can neither read a file elsewhere nor reveal anything about it."""
    if not isinstance(name, str) or not name:
        raise InputError(source, field, f"expected a non-empty file name, got {name!r}")
    try:
        root = Path(folder).resolve()     # the folder itself may be a link loop (`run a`, a -> b -> a)
    except (OSError, RuntimeError, ValueError) as exc:
        raise InputError(str(folder), "", f"cannot resolve the folder ({exc})") from None
    try:
        path = (root / name).resolve()
    except (OSError, RuntimeError, ValueError) as exc:   # a link loop, a NUL byte
        raise InputError(source, field, f"cannot resolve {name!r} ({exc})") from None
    if path == root or not path.is_relative_to(root):
        raise InputError(source, field, f"{name!r} is not a file inside {folder} (links followed); "
                         "only files inside it are read")
    return path


def load_text(path: str | Path, *, what: str = "file") -> str:
    """A user's UTF-8 text file (a leading byte-order mark, as spreadsheets write, is dropped)."""
    data = read_input(path, what=what)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(str(path), "", f"not a UTF-8 text file (byte {exc.start})") from None


# Python objects per character of JSON, at most: a list of empty objects or lists, or of
# {"a":1}, takes 21-24 bytes per character once parsed (tracemalloc, CPython 3.11); numbers and
# text take 3-8. A file under the input size cap could otherwise parse past the memory cap.
JSON_BYTES_PER_CHAR = 25


class DuplicateKey(ValueError):
    """A JSON object names one key twice (raised by :func:`json_loads`)."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key_as_field(key)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        raise DuplicateKey(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return obj


def json_loads(text: str) -> Any:
    """``json.loads`` that refuses an object naming a key twice (:class:`DuplicateKey`): Python
    keeps the last value without a word, so ``{"rounds": 1, "rounds": 3}`` had meant 3."""
    return json.loads(text, object_pairs_hook=_unique_keys)


def load_json(path: str | Path) -> Any:
    """Read a JSON file, turning I/O, size, nesting and syntax problems into :class:`InputError`."""
    path = Path(path)
    text = load_text(path, what="JSON file")
    if not text.strip():
        raise InputError(str(path), "", "empty file")
    check_bytes(str(path), "", f"its {len(text):,} characters of JSON", len(text) * JSON_BYTES_PER_CHAR)
    return parse_json(text, str(path))


def parse_json(text: str, source: str) -> Any:
    """JSON text (of the file or argument ``source``) whose duplicate keys, syntax, nesting and
    overlong integers are :class:`InputError`."""
    try:
        return json_loads(text)
    except DuplicateKey as exc:
        raise InputError(source, exc.key, "given twice in one object") from None
    except json.JSONDecodeError as exc:
        raise InputError(source, f"line {exc.lineno}", f"invalid JSON ({exc.msg})") from None
    except RecursionError:
        raise InputError(source, "", "nested too deeply") from None
    except ValueError as exc:       # an integer past Python's digit limit (sys.get_int_max_str_digits)
        raise InputError(source, long_number_line(text), too_many_digits(exc)) from None


def too_many_digits(exc: ValueError) -> str:
    """The message for an integer past Python's digit limit (``sys.get_int_max_str_digits``),
    without the interpreter's advice on raising the limit."""
    return f"invalid number ({str(exc).partition(';')[0]})"


def long_number_line(text: str) -> str:
    """``line N`` of the first run of digits longer than the interpreter converts to an int
    (json and tomllib raise a plain ValueError without a position for it)."""
    limit = sys.get_int_max_str_digits()
    match = re.search(rf"\d{{{limit + 1},}}", text) if limit else None
    return f"line {text.count(chr(10), 0, match.start()) + 1}" if match else ""


def load_toml(path: str | Path) -> dict:
    """Read a TOML file with the same checks as :func:`load_json`."""
    path = Path(path)
    text = load_text(path, what="TOML file")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(str(path), "", f"invalid TOML ({exc})") from None
    except RecursionError:
        raise InputError(str(path), "", "nested too deeply") from None
    except ValueError as exc:       # an integer past Python's digit limit
        raise InputError(str(path), long_number_line(text), too_many_digits(exc)) from None


def read_csv(path: str | Path, *, what: str = "CSV file") -> list[tuple[int, list[str]]]:
    """Non-empty rows of a CSV file with the line each starts on; a field past the csv module's
    size limit or a broken quote is an error naming the line (and the column, when it is a field
    that is too long)."""
    return parse_csv(load_text(path, what=what), str(path))


def parse_csv(text: str, source: str) -> list[tuple[int, list[str]]]:
    """:func:`read_csv` on a file's text already read (by a loader that sizes it first)."""
    reader = csv.reader(io.StringIO(text, newline=""))
    rows, start = [], 1
    try:
        for row in reader:
            if any(c.strip() for c in row):
                rows.append((start, row))
            start = reader.line_num + 1
    except csv.Error as exc:
        raise InputError(source, _csv_fault(text, start, len(rows)), f"unreadable CSV ({exc})") from None
    return rows


def _csv_fault(text: str, line: int, good_rows: int) -> str:
    """``line N`` of a row the csv module refused, with ``column C`` when one field is too long
    (re-read without the field limit; the input size cap already bounds the memory)."""
    limit = csv.field_size_limit()
    csv.field_size_limit(max(limit, len(text) + 1))
    try:
        rows = [r for r in csv.reader(io.StringIO(text, newline="")) if any(c.strip() for c in r)]
    except csv.Error:
        return f"line {line}"
    finally:
        csv.field_size_limit(limit)
    if good_rows < len(rows):
        for col, cell in enumerate(rows[good_rows], start=1):
            if len(cell) > limit:
                return f"line {line}: column {col}"
    return f"line {line}"


def finite_number(value: Any) -> bool:
    """A real number (a JSON number, a numpy scalar; not a bool) that fits a float and is finite."""
    try:
        return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    except OverflowError:                  # an integer beyond float range
        return False


def check_fields(doc: dict, known, source: str, where: str = "") -> None:
    """Refuse a key of the JSON object ``doc`` (at field ``where``) that is not in ``known``: a
    misspelt optional field (``"round": 3`` for ``"rounds"``) had silently taken its default."""
    unknown = next((key for key in doc if key not in known), None)
    if unknown is not None:
        shown = key_as_field(unknown)
        raise InputError(source, f"{where}.{shown}" if where else shown, f"unknown field (known: {', '.join(known)})")


def key_as_field(key: str) -> str:
    """A key of a user's JSON object as an error's field: itself, or quoted and cut when it is
    long or holds control characters."""
    return key if len(key) <= 40 and not has_control_characters(key) else brief_value(key)


def exists_safely(path: Path, *, file: bool = False) -> bool:
    """``path.exists()`` (``is_file()`` with ``file``), False for a name the file system cannot
    hold: pathlib raises ENAMETOOLONG (a 300-byte name in an instance, a plan or a multi-network
    instance had been an OSError traceback)."""
    try:
        return path.is_file() if file else path.exists()
    except OSError:
        return False


def instance_name(name: Any) -> str:
    """A catalogue name or file path as a loader takes it: text (a path object as its text),
    not empty, without NUL. Through the API, None had been a TypeError, 5 a TypeError and a NUL
    a ValueError from deep in pathlib."""
    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    if not isinstance(name, str) or not name or "\x00" in name:
        raise InputError("instance", "", f"expected a catalogue name or a file path, got {brief_value(name)}")
    return name


def has_control_characters(text: str) -> bool:
    """Whether ``text`` holds a character a terminal acts on: a C0 control, DEL, a C1 control
    (CSI, NEL), a bidirectional override, or a line or paragraph separator
    (``errors.NAME_CONTROLS``). Refused in names that become folder names, table cells or printed
    headings (a NUL had crashed pareto's folder name; a CSI 2J in an instance's name had cleared
    the screen)."""
    return NAME_CONTROLS.search(text) is not None


# A name a user gives (an instance's, a network's, a profile's, a code's scheme) is printed in
# tables and headings and may become a folder name: at most what one file name holds (255 bytes
# on ext4, APFS and NTFS alike). A 10 MB rollout name had been printed whole.
MAX_NAME_BYTES = 255


def check_name(value: Any, source: str, field: str, *, capped: bool = True) -> str:
    """``value`` as a name: non-empty text without control characters (:func:`has_control_characters`)
    and, when ``capped``, of at most ``MAX_NAME_BYTES`` bytes in UTF-8; otherwise an InputError
    naming ``source`` and ``field``. Unit names are not capped: they are ONNX node names, which
    no limit of ours binds, and are never a file name."""
    if isinstance(value, str) and value and not has_control_characters(value):
        size = len(value.encode("utf-8", "surrogatepass"))
        if size <= MAX_NAME_BYTES or not capped:
            return value
        raise InputError(source, field, f"a name of at most {MAX_NAME_BYTES} bytes, got {size:,}")
    raise InputError(source, field, f"expected a non-empty name without control characters, got {brief_value(value)}")


def name_number(digits: str, most: int, source: str, field: str) -> int:
    """A whole number written in a catalogue name (ASCII digits), at most ``most``: compared as
    text first, so thousands of digits (past Python's limit for int()) are refused unread."""
    digits = digits.lstrip("0") or "0"
    if len(digits) > len(str(most)) or int(digits) > most:
        shown = digits if len(digits) <= 20 else f"a {len(digits):,}-digit number"
        raise InputError(source, field, f"expected a whole number from 0 to {most:,}; {shown} is above {most:,}")
    return int(digits)


# A number written as text: ASCII decimal, as CSV writers and JSON write it (float() also takes
# "1_0" as 10 and full-width or Arabic-Indic digits); inf and nan are read, then refused as such.
NUMBER_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(inf|infinity|nan)", re.ASCII | re.IGNORECASE)


def parse_number(value: Any, source: str, field: str, *, integer: bool = False) -> float | int:
    """A finite number from a CSV cell or JSON value; NaN, infinities, overflowing and
    non-numeric text are one-line errors naming ``field`` (for CSV: ``line N: column``)."""
    if isinstance(value, bool) or value is None:
        raise InputError(source, field, f"not a number: {value!r}")
    text = value.strip() if isinstance(value, str) else value
    if isinstance(text, str) and not NUMBER_TEXT.fullmatch(text):
        raise InputError(source, field, f"not a number: {brief_value(value)}")
    try:
        number = float(text)
    except (TypeError, ValueError, OverflowError):
        raise InputError(source, field, f"not a number: {value!r}") from None
    if not math.isfinite(number):
        raise InputError(source, field, f"not a finite number: {value!r}")
    if integer:
        if number != int(number):
            raise InputError(source, field, f"not a whole number: {value!r}")
        return int(number)
    return number


def check_output(path: str | Path, *, folder: bool = False, log: bool = False) -> Path:
    """Refuse an output path that is a symlink, an existing thing of the wrong kind (a folder
    where a file is expected, a file where a folder is, a device, FIFO or socket) or one of this
    command's inputs (unless it is a ``log`` the command reads and appends to, as bench's
    runs.jsonl), before anything is written. Returns ``path``."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise InputError(str(path), "", f"cannot write ({exc.strerror or exc})") from None
    if stat.S_ISLNK(st.st_mode):
        raise InputError(str(path), "", "output is a symbolic link; give the real path")
    if folder and not stat.S_ISDIR(st.st_mode):
        raise InputError(str(path), "", f"output folder is {_kind(st.st_mode) if not stat.S_ISREG(st.st_mode) else 'a file'}")
    if not folder and not stat.S_ISREG(st.st_mode):
        raise InputError(str(path), "", f"output is {_kind(st.st_mode)}, expected a file (or a new name)")
    if not log and _identity(st) in _INPUTS:
        raise InputError(str(path), "", "output would overwrite an input of this command")
    return path


# Left in every --out folder a command writes fixed file names into: the folder is pipeplan's, so
# a later command may replace the files it writes there. An empty file of this name made by hand
# gives the same consent (a folder written by a pipeplan from before the marker).
OUT_MARKER = ".pipeplan-out"
MARKER_TEXT = ("This folder was written by pipeplan: its commands may replace the files they write here "
               "(reports, tables, plots); files of other names are never touched.\n")


def check_out_folder(out: str | Path, *, ours: tuple[str, ...] = (), option: str = "--out",
                     writes: tuple[str, ...] = ()) -> Path:
    """Refuse an existing ``out`` folder that pipeplan did not write, before anything is written:
    ``out`` must be new, empty, hold ``OUT_MARKER`` or a file named in ``ours`` (what makes it
    recognisably the command's own from before the marker: a bench folder's runs.jsonl). A folder
    of the user's own (their report.md, suite.json, summary.csv) had been overwritten in place.
    Also every check of :func:`check_output` (a link, a file, a device as ``out``).

    ``writes``: the files a command will stage into ``out`` (:func:`staged_folder`), checked
    now as the commit checks them (no link, no folder, nothing under a linked folder), and the
    folder the stage goes in must take a new folder: a study had found a link among its outputs
    or a read-only parent only when it committed, after minutes of work."""
    out = check_output(out, folder=True)
    if os.path.lexists(out):
        _check_marker(out, ours, option)
        for name in writes:
            _check_inside(out, out / name)
    if writes:
        _check_stage_possible(out)
    return out


STAGE_PREFIX, UNDO_PREFIX = ".pp-stage-", ".pp-undo-"     # staged_folder's temporary folders
LEFT_BY_US = (STAGE_PREFIX, UNDO_PREFIX)


def _stage_anchor(out: Path) -> Path:
    """The folder a stage for ``out`` goes in, on the file system of ``out``'s files so that the
    commit is a rename: ``out`` itself when it exists (a stage beside it had failed at the
    commit when ``out`` was a mount point, a container's volume, and was refused when only
    ``out`` was writable), else the nearest existing folder above it."""
    if os.path.isdir(out) and not os.path.islink(out):
        return out
    anchor = out.parent
    while not anchor.exists():
        anchor = anchor.parent
    return anchor


def _check_stage_possible(out: Path) -> None:
    anchor = _stage_anchor(out)
    try:
        os.rmdir(tempfile.mkdtemp(prefix=STAGE_PREFIX, dir=anchor))
    except OSError as exc:
        raise InputError(str(out), "", f"cannot write ({exc.strerror or exc})") from None


def _check_marker(out: Path, ours: tuple[str, ...], option: str) -> None:
    """InputError unless ``out`` (which exists) is pipeplan's: empty, marked, or holding one of
    ``ours``."""
    for name in (OUT_MARKER, *ours):
        try:
            mode = os.lstat(out / name).st_mode
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise InputError(str(out), option, f"cannot read the folder ({exc.strerror or exc})") from None
        if stat.S_ISREG(mode):
            return
        if name == OUT_MARKER:      # a link or a folder of that name is no consent
            raise InputError(str(out / name), option, f"is {_kind(mode) if not stat.S_ISLNK(mode) else 'a symbolic link'}, "
                                                      f"not pipeplan's marker file: give a new or empty folder")
    try:
        with os.scandir(out) as entries:
            # a stage or backup folder of pipeplan's own that a killed run left (SIGKILL, the OOM
            # killer) does not make the folder the user's: the next run had been refused
            first = [e.name for _, e in zip(range(3), (e for e in entries if not e.name.startswith(LEFT_BY_US)))]
    except OSError as exc:
        raise InputError(str(out), option, f"cannot read the folder ({exc.strerror or exc})") from None
    if not first:
        return
    shown = ", ".join(first[:2]) + (", ..." if len(first) > 2 else "")
    raise InputError(str(out), option, f"not a folder pipeplan wrote (it holds {shown} and no {OUT_MARKER}): "
                                       f"give a new or empty folder, or add an empty {OUT_MARKER} to let pipeplan "
                                       "replace the files it writes there")


def mark_out_folder(out: str | Path) -> Path:
    """Leave ``OUT_MARKER`` in ``out`` (checked by :func:`check_out_folder` first): for commands
    that write their files one by one rather than through :func:`staged_folder`."""
    return write_atomic(Path(out) / OUT_MARKER, MARKER_TEXT)


def write_atomic(path: str | Path, data: str | bytes, *, log: bool = False) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename,
    so a reader never sees a half-written file and a crash leaves the old file intact. The
    temporary name is short and fixed in length, so any name the file system takes works.
    ``log``: ``path`` is a table of the command's own that it read and now rewrites (as
    ``pipeplan optima`` merges its rows), not an input it must leave alone."""
    path = check_output(path, log=log)
    created: list[Path] = []
    try:
        created = make_folders(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=".pp-", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        remove_folders(created)
        raise InputError(str(path), "", f"cannot write ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
        os.chmod(tmp, 0o644)
        check_stop()        # a SIGTERM the command's code swallowed (matplotlib's) commits nothing
        os.replace(tmp, path)
    except BaseException as exc:        # the folders it made go too: nothing partial is left
        Path(tmp).unlink(missing_ok=True)
        remove_folders(created)
        if isinstance(exc, OSError):
            raise InputError(str(path), "", f"cannot write ({exc.strerror or exc})") from None
        raise
    return path


PRETTY_JSON_MAX = 1 << 20


def write_json(path: str | Path, obj: Any) -> Path:
    """Indented JSON up to 1 MiB; larger documents (a dense code matrix at n = 2,000) compact:
    indenting forces Python's slow encoder and multiplies the size."""
    text = json.dumps(obj)
    if len(text) <= PRETTY_JSON_MAX:
        text = json.dumps(obj, indent=2)
    return write_atomic(path, text + "\n")


@contextmanager
def staged_folder(out: str | Path, *, ours: tuple[str, ...] = (), marked: bool = True,
                  writes: tuple[str, ...] = (), logs: tuple[str, ...] = ()) -> Iterator[Path]:
    """A temporary folder beside ``out`` for a command that writes several files: they are moved
    into ``out`` (created if needed) only when the block ends without an error, so a failure
    midway leaves ``out`` as it was (and creates nothing). Files already in ``out`` that the
    command does not write again stay. Every destination is checked with :func:`check_output`
    (and must stay inside ``out``) before the first file moves. ``marked`` (every ``--out``
    folder): ``out`` must first pass :func:`check_out_folder` (``ours`` as there), and
    ``OUT_MARKER`` moves in with the files; ``marked=False`` only where the user names a folder
    to update by design (``import-khadas --repo``). ``writes``: as for :func:`check_out_folder`,
    for a command that makes its stage before its work. ``logs``: names of the command's own
    tables in ``out`` that it read and now replaces (``write_atomic``'s ``log``), not inputs
    it must leave alone.

    The commit is as atomic as the file system allows: a new ``out`` is the stage folder renamed
    once; into an existing ``out`` the files move one by one, each file it replaces hard-linked
    (or copied) aside first, and a failure (or a signal) partway moves every replaced file back
    and removes the files and folders this commit created, so ``out`` is as it was."""
    out = check_out_folder(out, ours=ours, writes=writes) if marked else check_output(out, folder=True)
    anchor = _stage_anchor(out)
    try:
        stage = Path(tempfile.mkdtemp(prefix=STAGE_PREFIX, dir=anchor))
    except OSError as exc:
        raise InputError(str(out), "", f"cannot write ({exc.strerror or exc})") from None
    try:
        yield stage
        if marked:
            write_atomic(stage / OUT_MARKER, MARKER_TEXT)
        files = sorted(p for p in stage.rglob("*") if p.is_file())
        moves = [(src, out / src.relative_to(stage)) for src in files]
        for _, dst in moves:
            _check_inside(out, dst, log=dst.parent == out and dst.name in logs)
        check_stop()        # a SIGTERM swallowed while the files were made (matplotlib's) commits nothing
        try:
            if os.path.lexists(out):
                _move_in(stage, out, moves, anchor)
            else:
                _rename_in(stage, out)
        except OSError as exc:
            raise InputError(str(out), "", f"cannot write ({exc.strerror or exc})") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def make_folders(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; the ones created, outermost first."""
    missing = []
    while not os.path.lexists(folder):
        missing.append(folder)
        folder = folder.parent
    created = []
    try:
        for f in reversed(missing):
            f.mkdir()
            created.append(f)
    except BaseException:
        remove_folders(created)
        raise
    return created


def remove_folders(created: list[Path]) -> None:
    """Remove the folders ``created`` (as :func:`make_folders` returns them), innermost first,
    only while they are empty."""
    for f in reversed(created):
        try:
            f.rmdir()
        except OSError:
            pass


def folder_mode() -> int:
    """The mode ``mkdir`` gives a new folder under the process's umask: a temporary folder
    (``mkdtemp`` makes it owner-only) gets it before it is renamed into a user's output."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o777 & ~mask


def _rename_in(stage: Path, out: Path) -> None:
    """A new ``out``: the stage itself, renamed once (its empty folders dropped, its mode the
    one ``mkdir`` would give), so every file appears at the same instant."""
    for folder, subdirs, names in os.walk(stage, topdown=False):
        if folder != str(stage) and not os.listdir(folder):
            os.rmdir(folder)
    created = make_folders(out.parent)
    try:
        os.chmod(stage, folder_mode())
        os.rename(stage, out)
    except BaseException:
        remove_folders(created)
        raise


def _move_in(stage: Path, out: Path, moves: list[tuple[Path, Path]], anchor: Path) -> None:
    """Move ``moves`` into the existing ``out``, undoing every move if one fails: a replaced
    file is hard-linked (or copied) into a backup folder before the move and put back on
    failure; a new file and the folders created for it are removed. A file that cannot be put
    back is kept in the backup folder, which the error names (nothing the tool did not write
    is deleted)."""
    backup = Path(tempfile.mkdtemp(prefix=UNDO_PREFIX, dir=anchor))
    done: list[tuple[Path, Path | None]] = []       # (destination, its backup or None if new)
    created: list[Path] = []
    try:
        for i, (src, dst) in enumerate(moves):
            created += make_folders(dst.parent)
            saved = None
            if os.path.lexists(dst):
                saved = backup / str(i)
                try:
                    os.link(dst, saved)
                except OSError:
                    shutil.copy2(dst, saved)
            done.append((dst, saved))
            os.replace(src, dst)
    except BaseException as exc:
        lost = _undo(done, created)
        if lost:
            if isinstance(exc, OSError):
                raise InputError(str(out), "", f"cannot write ({exc.strerror or exc}); {len(lost)} replaced "
                                 f"file(s) could not be put back, their earlier versions are in {backup}: "
                                 + ", ".join(str(d) for d in lost)) from None
            raise
        shutil.rmtree(backup, ignore_errors=True)
        raise
    shutil.rmtree(backup, ignore_errors=True)


def _undo(done: list[tuple[Path, Path | None]], created: list[Path]) -> list[Path]:
    """Put back what :func:`_move_in` did, last move first; the destinations it could not put back."""
    lost = []
    for dst, saved in reversed(done):
        try:
            if saved is None:
                dst.unlink(missing_ok=True)
            elif os.path.lexists(saved):
                os.replace(saved, dst)
        except OSError:
            lost.append(dst)
    remove_folders(created)
    return lost


def _check_inside(out: Path, dst: Path, *, log: bool = False) -> None:
    """``dst`` may not be a link or special file, nor lie under a linked folder inside ``out``."""
    check_output(dst, log=log)
    folder = dst.parent
    while folder != out:
        check_output(folder, folder=True)
        folder = folder.parent
