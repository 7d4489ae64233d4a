"""Running the CLI as a user does (a subprocess) and checking the one-line error contract."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args, cwd=None, env=None):
    """``env``: variables set on top of this process's environment."""
    return subprocess.run([sys.executable, "-m", "pipeplan.app.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd or ROOT, timeout=300, env={**os.environ, **(env or {})})


def assert_input_error(proc, *needles):
    """Exit status 2, exactly one line on stderr starting with 'error: ', no traceback."""
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]
