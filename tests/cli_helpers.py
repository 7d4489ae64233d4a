"""Running the CLI as a user does (a process of its own) and checking the one-line error contract."""
import atexit
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 300
_zygote: subprocess.Popen | None = None
_one_at_a_time = threading.Lock()      # the zygote answers one request at a time


def run_cli(*args, cwd=None, env=None):
    """``pipeplan args`` in a process of its own; ``env``: variables set on top of this
    process's environment. The process is forked from a parent that has the libraries
    imported already (tests/cli_zygote.py says why and what the child shares);
    PIPEPLAN_TESTS_FRESH_CLI=1 starts a fresh interpreter per run instead."""
    args = [str(a) for a in args]
    environment = {**os.environ, **(env or {})}
    if os.environ.get("PIPEPLAN_TESTS_FRESH_CLI") == "1":
        return subprocess.run([sys.executable, "-m", "pipeplan.app.cli", *args], capture_output=True, text=True,
                              cwd=cwd or ROOT, timeout=TIMEOUT_S, env=environment)
    with tempfile.TemporaryDirectory(prefix="pipeplan-cli-") as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        with _one_at_a_time:
            status = _forked(dict(args=args, cwd=str(cwd or ROOT), env=environment, stdout=str(out),
                                  stderr=str(err)))
        return subprocess.CompletedProcess(["pipeplan", *args], status, out.read_text(),
                                           err.read_text(errors="replace"))


def _forked(request: dict) -> int:
    global _zygote
    if _zygote is None or _zygote.poll() is not None:
        _zygote = subprocess.Popen([sys.executable, "-m", "tests.cli_zygote"], cwd=ROOT, stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, bufsize=0)
        atexit.register(_stop, _zygote)
    _zygote.stdin.write((json.dumps(request) + "\n").encode())
    pid = int(_line(_zygote.stdout.fileno(), TIMEOUT_S))
    try:
        return int(_line(_zygote.stdout.fileno(), TIMEOUT_S))
    except subprocess.TimeoutExpired:
        os.kill(pid, 9)
        _line(_zygote.stdout.fileno(), TIMEOUT_S)
        raise subprocess.TimeoutExpired(["pipeplan", *request["args"]], TIMEOUT_S) from None


def _stop(zygote: subprocess.Popen) -> None:
    """End of the test process: the zygote's requests end, and so does it."""
    zygote.stdin.close()
    try:
        zygote.wait(10)
    except subprocess.TimeoutExpired:
        zygote.kill()
        zygote.wait()
    zygote.stdout.close()


def _line(fd: int, timeout: float) -> str:
    """One line from the zygote, read byte by byte (a buffered reader could hold the next line
    where ``select`` does not see it)."""
    data = b""
    while not data.endswith(b"\n"):
        if not select.select([fd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired("zygote", timeout)
        byte = os.read(fd, 1)
        if not byte:
            raise RuntimeError("the CLI test parent (tests/cli_zygote.py) died")
        data += byte
    return data.decode()


def assert_input_error(proc, *needles):
    """Exit status 2, exactly one line on stderr starting with 'error: ', no traceback."""
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]
