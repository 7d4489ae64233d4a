"""The import contracts of pyproject.toml ([tool.importlinter]): layers in one direction, the
three systems independent, no cycles; only the application reaches the solve facade (directly,
or through the root package, which re-exports it for users).

The top-level folders (formulations/, solvers/, profiles/, instances/, deploy/) are linked into
pipeplan/ (pipeplan/formulations -> ../formulations, ...), so `lint-imports` in the repository
root sees the package as it is installed; this test runs exactly that.
"""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_hold():
    lint = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    proc = subprocess.run([sys.executable, "-c", lint, "--no-cache", "--no-logo"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "BROKEN" not in proc.stdout and proc.stdout.count("KEPT") >= 8
