"""Real response-length traces: CSV or JSONL rows with a prompt id, a sample id and the
response tokens (optionally the prompt tokens), turned into one round.

CSV header (any column order): ``prompt_id,sample_id,response_tokens[,prompt_tokens]``;
JSONL: one object per line with the same keys. Groups keep the order in which their prompt
ids first appear; samples are sorted by sample id (integer ids numerically, then the others as
text); every prompt needs the same number of samples (K). A trace of more lines than the
memory cap holds requests (``check_memory``, as a drawn round's ``--R x --K``) is refused
before its rows are parsed. A missing, non-integer, negative or too large length (over ``MAX_COUNT``, 1e9
tokens) is an error naming the file, the line and the column (``t.csv: line 3: response_tokens``).
"""
from __future__ import annotations

import difflib
import json
import unicodedata
from pathlib import Path

from pipeplan.core.errors import InputError, brief_value
from pipeplan.core.io import DuplicateKey, json_loads, load_json, load_text, parse_csv, parse_number, too_many_digits
from pipeplan.core.sizes import check_memory
from pipeplan.formulations.rollout.problem import BYTES_PER_REQUEST, MAX_COUNT, RolloutProblem, problem_from_dict
from pipeplan.formulations.rollout.workloads import check_groups, make_round

REQUIRED = ("prompt_id", "sample_id", "response_tokens")
READ = (*REQUIRED, "prompt_tokens")
DEFAULT_PROMPT_TOKENS = 256


def _check_columns(path: Path, where: str, names) -> None:
    """Columns a trace does not use are left alone (an engine's export carries text, rewards,
    timings), except one that looks like a misspelt column it reads: ``promt_tokens`` had left
    every prompt at the default length without a word."""
    for name in names:
        if name not in READ:
            close = difflib.get_close_matches(str(name), READ, n=1, cutoff=0.8)
            if close:
                raise InputError(str(path), where, f"column {brief_value(name)} is not read: "
                                                   f"did you mean {close[0]}? (reads {', '.join(READ)})")


def _rows(path: Path) -> list[tuple[int, dict]]:
    text = load_text(path, what="trace")
    # every line may be a request: refused before the rows are parsed (about 850 bytes each,
    # under what simulating a request takes) when the round could not be held
    check_memory(f"{path}: lines", text.count("\n") + (not text.endswith("\n")), BYTES_PER_REQUEST)
    if path.suffix == ".jsonl":
        if not text.strip():
            raise InputError(str(path), "", "empty trace")
        rows = []
        # lines end at "\n" alone: a JSON string may hold U+2028 or U+0085, at which splitlines
        # had cut a valid line in two
        for n, line in enumerate(text.split("\n"), start=1):
            if line.strip():
                try:
                    row = json_loads(line)
                except DuplicateKey as exc:
                    raise InputError(str(path), f"line {n}: {exc.key}", "given twice in one object") from None
                except json.JSONDecodeError as exc:
                    raise InputError(str(path), f"line {n}", f"invalid JSON ({exc.msg})") from None
                except RecursionError:
                    raise InputError(str(path), f"line {n}", "nested too deeply") from None
                except ValueError as exc:      # an integer past Python's digit limit
                    raise InputError(str(path), f"line {n}", too_many_digits(exc)) from None
                if not isinstance(row, dict):
                    raise InputError(str(path), f"line {n}", "expected a JSON object")
                rows.append((n, row))
        for keys, n in {frozenset(row): n for n, row in reversed(rows)}.items():   # each set of keys once
            _check_columns(path, f"line {n}", sorted(keys))
        return rows
    lines = parse_csv(text, str(path))
    if not lines:
        raise InputError(str(path), "", "empty trace")
    header = lines[0][1]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise InputError(str(path), "header", f"missing column(s) {', '.join(missing)}")
    _check_columns(path, "header", header)
    # as evaluate --batch: a second response_tokens column had silently replaced the first
    twice = next((c for c in (*REQUIRED, "prompt_tokens") if header.count(c) > 1), None)
    if twice:
        raise InputError(str(path), "header", f"column {twice} named twice")
    return [(n, dict(zip(header, row))) for n, row in lines[1:]]


def _count(path: Path, n: int, row: dict, key: str, *, positive: bool = False) -> int:
    value = row.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise InputError(str(path), f"line {n}: {key}", "missing")
    if _typed(path) and isinstance(value, str):     # JSON numbers in JSON, as every JSON format: "3" had been 3
        raise InputError(str(path), f"line {n}: {key}", f"expected a JSON number, got text {brief_value(value)}")
    number = parse_number(value, str(path), f"line {n}: {key}", integer=True)
    if number < (1 if positive else 0):
        raise InputError(str(path), f"line {n}: {key}",
                         f"expected a {'positive' if positive else 'non-negative'} whole number, got {value!r}")
    if number > MAX_COUNT:   # checked here, where the line is known (the round's own check names an index)
        raise InputError(str(path), f"line {n}: {key}", f"expected at most {MAX_COUNT:,} tokens, got {value!r}")
    return number


_NINES = str.maketrans("0123456789", "9876543210")


def sample_order(sid: str) -> tuple:
    """Sort key of a sample id: integers (an optional ``-`` and decimal digits, as ``int`` reads
    them) in numeric order, of any length (compared as digit strings: int() refuses more than
    4,300 digits), then every other id as text (``--1``, ``²``)."""
    body = sid[1:] if sid.startswith("-") else sid
    if not body.isdecimal():
        return (1, sid)
    digits = "".join(str(unicodedata.decimal(c)) for c in body).lstrip("0")
    if sid.startswith("-") and digits:          # larger magnitudes first: nines' complement
        return (0, 0, -len(digits), digits.translate(_NINES))
    return (0, 1, len(digits), digits)


def _typed(path: Path) -> bool:
    """A JSONL trace, whose values carry JSON types (a CSV's are all text)."""
    return path.suffix == ".jsonl"


def _id(path: Path, n: int, row: dict, key: str, kinds: dict | None = None) -> str:
    """A prompt or sample id as text. In JSONL an id is text or a whole number, and a prompt id
    (``kinds``: the type each was first written with) is not both: ``1`` and ``"1"``, or ``null``
    and ``"None"``, had been merged into one prompt. (A sample written both ways appears twice.)"""
    value = row[key]
    if not _typed(path):
        return str(value)
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputError(str(path), f"line {n}: {key}", f"expected text or a whole number, got {brief_value(value)}")
    text = str(value)
    if kinds is not None and kinds.setdefault(text, type(value)) is not type(value):
        raise InputError(str(path), f"line {n}: {key}", f"{brief_value(value)} is also written as "
                                                        f"{'text' if isinstance(value, int) else 'a number'} elsewhere")
    return text


def load_trace(path: str | Path, *, R: int | None = None, engine=None, trainer=None, jitter_groups: float = 0.0,
               seed: int = 0) -> RolloutProblem:
    """A round from a trace; ``R`` keeps the first R prompts."""
    path = Path(path)
    if R is not None:
        check_groups(str(path), R)
    groups: dict[str, dict] = {}
    pid_kinds: dict[str, type] = {}
    for n, row in _rows(path):
        for key in REQUIRED:
            if key not in row:
                raise InputError(str(path), f"line {n}: {key}", "missing")
        pid = _id(path, n, row, "prompt_id", pid_kinds)
        sid = _id(path, n, row, "sample_id")
        g = groups.setdefault(pid, {"samples": {}, "prompt": None})
        if sid in g["samples"]:
            raise InputError(str(path), f"line {n}", f"prompt {pid!r} sample {sid!r} appears twice")
        g["samples"][sid] = _count(path, n, row, "response_tokens")
        if row.get("prompt_tokens") not in (None, ""):
            prompt = _count(path, n, row, "prompt_tokens", positive=True)
            if g["prompt"] not in (None, prompt):       # one prompt, one length
                raise InputError(str(path), f"line {n}: prompt_tokens",
                                 f"{prompt} for prompt {pid!r}, which an earlier row gave {g['prompt']}")
            g["prompt"] = prompt
    if not groups:
        raise InputError(str(path), "", "no rows")
    chosen = list(groups.items())[:R] if R is not None else list(groups.items())
    if R is not None and len(chosen) < R:
        raise InputError(str(path), "R", f"the trace has {len(chosen)} prompts, fewer than R = {R}")
    sizes = {len(g["samples"]) for _, g in chosen}
    if len(sizes) != 1:
        raise InputError(str(path), "sample_id", f"prompts have different numbers of samples {sorted(sizes)} (K must be equal)")

    responses = [[g["samples"][s] for s in sorted(g["samples"], key=sample_order)] for _, g in chosen]
    prompts = [g["prompt"] or DEFAULT_PROMPT_TOKENS for _, g in chosen]
    return make_round(f"trace/{path.stem}", prompts, responses, engine=engine, trainer=trainer,
                      jitter_groups=jitter_groups, seed=seed, source=str(path),
                      meta={"trace": str(path), "prompt_ids": [pid for pid, _ in chosen]})


def load_problem_file(path: str | Path) -> RolloutProblem:
    """A ``pipeplan.rollout/1`` JSON problem, or a CSV/JSONL trace."""
    path = Path(path)
    if path.suffix == ".json":
        return problem_from_dict(load_json(path), str(path))
    return load_trace(path)
