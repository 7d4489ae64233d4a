"""File helpers: JSON reading with clear errors, atomic writes (temp file, then rename) and
staged result folders (every file of a command appears together, or none does)."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from pipeplan.errors import InputError


def load_json(path: str | Path) -> Any:
    """Read a JSON file, turning I/O and syntax problems into :class:`InputError`."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(str(path), "", f"cannot read file ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise InputError(str(path), "", "not a UTF-8 text file") from None
    if not text.strip():
        raise InputError(str(path), "", "empty file")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(str(path), f"line {exc.lineno}", f"invalid JSON ({exc.msg})") from None


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename,
    so a reader never sees a half-written file and a crash leaves the old file intact."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise InputError(str(path), "", f"cannot write ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | Path, obj: Any) -> Path:
    return write_atomic(path, json.dumps(obj, indent=2) + "\n")


@contextmanager
def staged_folder(out: str | Path) -> Iterator[Path]:
    """A temporary folder beside ``out`` for a command that writes several files: they are moved
    into ``out`` (created if needed) only when the block ends without an error, so a failure
    midway leaves ``out`` as it was (and creates nothing). Files already in ``out`` that the
    command does not write again stay."""
    out = Path(out)
    anchor = out.parent
    while not anchor.exists():         # stage in the nearest existing folder: same file system
        anchor = anchor.parent
    try:
        stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.stage.", dir=anchor))
    except OSError as exc:
        raise InputError(str(out), "", f"cannot write ({exc.strerror or exc})") from None
    try:
        yield stage
        files = sorted(p for p in stage.rglob("*") if p.is_file())
        for src in files:
            dst = out / src.relative_to(stage)
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
        out.mkdir(parents=True, exist_ok=True)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
