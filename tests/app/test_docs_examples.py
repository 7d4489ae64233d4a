"""Every console example in README.md and docs/*.md runs, and prints what the page shows.

A ```console block holds commands (``$ ...``) each followed by its expected output. The
commands of one page run in order in one temporary folder (later examples use files earlier
ones wrote), through bash, with this interpreter's ``bin`` first on PATH. ``$ echo $?`` prints
the exit status of the command before it. Without a marker the output must be the same, line
for line (stdout, and the lines of stderr that start with ``error:`` or ``warning:``: progress
lines are not output); a command ending in ``# abridged`` is compared by the
parts it shows: its lines must appear in order, and ``...`` in a line stands for any text. A
command's output that starts with ``error:`` must come with a non-zero exit status, any other
with status 0 (unless the page shows the status with ``echo $?``).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ABRIDGED = "# abridged"


@dataclass
class Example:
    page: Path
    line: int
    command: str
    expected: list[str]
    abridged: bool


def examples(page: Path) -> list[Example]:
    out, block, current = [], False, None
    for n, line in enumerate(page.read_text().splitlines(), start=1):
        if line.startswith("```"):
            block = line.strip() == "```console"
            current = None
            continue
        if not block:
            continue
        if line.startswith("$ "):
            command = line[2:]
            abridged = command.rstrip().endswith(ABRIDGED)
            command = re.sub(r"\s+#.*$", "", command)        # a trailing comment is not run
            current = Example(page, n, command, [], abridged)
            out.append(current)
        elif current is not None:
            current.expected.append(line.rstrip())
    for ex in out:
        while ex.expected and not ex.expected[-1]:
            ex.expected.pop()
    return out


ALL = [ex for page in PAGES for ex in examples(page)]


def matches(template: str, line: str) -> bool:
    return re.fullmatch(".*?".join(map(re.escape, template.split("..."))), line) is not None


def check(ex: Example, actual: list[str]) -> None:
    where = f"{ex.page.relative_to(ROOT)}:{ex.line}: $ {ex.command}"
    if not ex.abridged:
        assert actual == ex.expected, f"{where}\n--- shown ---\n" + "\n".join(ex.expected) + \
            "\n--- printed ---\n" + "\n".join(actual)
        return
    i = 0
    for want in ex.expected:
        while i < len(actual) and not matches(want, actual[i]):
            i += 1
        assert i < len(actual), f"{where}\nnot printed (in this order): {want!r}\n--- printed ---\n" + "\n".join(actual)
        i += 1


def printed(proc) -> list[str]:
    """stdout, then the error and warning lines of stderr (progress lines are left out)."""
    err = [line for line in proc.stderr.splitlines() if line.startswith(("error:", "warning:"))]
    lines = [line.rstrip() for line in proc.stdout.splitlines() + err]
    while lines and not lines[-1]:
        lines.pop()
    return lines


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    made: dict[Path, tuple[Path, dict]] = {}

    def folder(page: Path):
        if page not in made:
            made[page] = (tmp_path_factory.mktemp(page.stem), {"status": 0})
        return made[page]
    return folder


@pytest.mark.parametrize("ex", ALL, ids=[f"{ex.page.stem}:{ex.line}" for ex in ALL])
def test_console_example(ex: Example, folders):
    cwd, state = folders(ex.page)
    if ex.command.strip() == "echo $?":
        check(ex, [str(state["status"])])
        return
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "COLUMNS": "100"}
    proc = subprocess.run(["bash", "-c", ex.command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)
    state["status"] = proc.returncode
    actual = printed(proc)
    check(ex, actual)
    shows_error = any(line.startswith("error:") for line in ex.expected)
    next_shows_status = any(e.command.strip() == "echo $?" and e.page == ex.page and e.line == ex.line + len(ex.expected) + 1
                            for e in ALL)
    if not next_shows_status:
        assert (proc.returncode != 0) == shows_error, f"{ex.page.name}:{ex.line}: exit {proc.returncode}\n{proc.stderr}"


def test_every_page_has_its_examples_collected():
    assert len(ALL) >= 30 and {ex.page.name for ex in ALL} >= {"README.md", "mapping.md", "formats.md"}
