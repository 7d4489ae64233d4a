"""The import contracts of pyproject.toml ([tool.importlinter]): layers in one direction, the
three systems independent, no cycles; only the application reaches the solve facade (directly,
or through the root package, which re-exports it for users).

pyproject maps formulations/, solvers/, profiles/, instances/ and deploy/ into ``pipeplan.*``
(package-dir), which import-linter's graph builder cannot follow in a source checkout: the test
assembles the installed layout in a temporary folder and lints that.
"""
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """The package as installed: every package-dir folder copied to its place under pipeplan/."""
    out = tmp_path_factory.mktemp("layout")
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for package, folder in sorted(mapping.items(), key=lambda kv: kv[0].count(".")):
        shutil.copytree(ROOT / folder, out.joinpath(*package.split(".")), dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.json", "*.csv", "*.toml", "*.onnx"))
    return out


def test_import_contracts_hold(tree):
    lint = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    proc = subprocess.run([sys.executable, "-c", lint, "--no-cache", "--no-logo", str(ROOT / "pyproject.toml")],
                          cwd=tree, env={"PYTHONPATH": str(tree), "PATH": ""}, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "BROKEN" not in proc.stdout and proc.stdout.count("KEPT") >= 7

