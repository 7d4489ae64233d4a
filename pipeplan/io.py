"""File helpers: JSON reading with clear errors, and atomic writes (temp file, then rename)."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

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
