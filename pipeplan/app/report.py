"""``pipeplan report RESULTS_DIR``: summarise a bench's runs.jsonl into summary.csv and
report.md, with one section per system and PNG plots.

Mapping: per instance, each solver's period, its ratio to the instance's certified reference
(the best proven optimum, else the best lower bound an exact solver, or a run that proved its
bound, reported, flagged), its gap to that same reference, time and status; a Pareto plot of
the NSGA-II front and every solver's plan. Other systems contribute their own sections through
``SECTIONS`` (tables and plots built from their records).

Gaps are the report's own, never a record's ``gap``: a heuristic's record carries its gap to
the formulation's analytic bound, which is weak (a heuristic at the proven optimum shows a
large one), so every gap here is taken against the certified reference, the same for all
solvers of an instance, or not shown (``-``) where no exact run certified one. A run cut short
shows which limit stopped it (``work limit`` or ``time limit``, the record's ``stopped_by``).
"""
from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

from pipeplan.app.bench import RECORDS, read_records
from pipeplan.app.figures import pareto_plot
from pipeplan.app.stored_optima import SNAPSHOT, read_optima, references
from pipeplan.core.errors import InputError, single_line
from pipeplan.core.io import inside_folder, load_json, staged_folder, write_atomic
from pipeplan.core.tables import cell, csv_text, markdown_table

# objectives per line of summary.csv: every mapping objective (period, latency, energy per frame,
# steady-state energy); the other systems' first ones by name (their records hold them all)
OBJECTIVE_SLOTS = 4
SUMMARY_COLUMNS = ("system", "instance", "solver", "seed", "termination", "stopped_by", "quality",
                   *(f"{c}_{i}" for i in range(1, OBJECTIVE_SLOTS + 1) for c in ("objective", "value")),
                   "gap", "wall_time_s", "message")


def summary_csv(records: list[dict]) -> str:
    """One line per run; its first ``OBJECTIVE_SLOTS`` objectives (by name) in objective_i /
    value_i; ``gap`` is the record's own (the solver's, against its own bound)."""
    rows = []
    for r in records:
        row = {k: r.get(k) for k in ("system", "instance", "solver", "seed", "termination", "stopped_by", "quality",
                                      "gap", "wall_time_s", "message")}
        for i, (k, v) in enumerate(sorted((r.get("objectives") or {}).items())[:OBJECTIVE_SLOTS], start=1):
            row[f"objective_{i}"], row[f"value_{i}"] = k, v
        rows.append(row)
    return csv_text(rows, SUMMARY_COLUMNS, formats={"wall_time_s": ".4g"})


PLOT_NAME_MAX = 120     # characters of an instance's name kept in its plot's file name
# Pareto plots per report: each PNG takes 0.1-0.3 s, so a bench folder of tens of thousands of
# instances would draw for hours; past this many the first ones in the table's order are drawn
# and the report says how many were left out (their fronts stay in runs.jsonl)
MAX_PARETO_PLOTS = 50
# Instances in the gradient-coding bar chart (one group of bars each): matplotlib's time and
# memory grow with the groups (10,000 took 70 s and 2.7 GB); past this many the first ones in the
# table's order are drawn and the report says so (the table keeps every instance). The catalogue
# has 14, so a real bench folder's chart is whole.
MAX_BAR_GROUPS = 50
# Solvers drawn in one plot (the gradcode chart's bars per instance, a Pareto plot's single
# plans): matplotlib lays out one legend entry each (3,000 solvers took 12 s per plot); past this
# many the first in the table's column order are drawn and the report says so. A system
# registers at most 13 solvers, so a real bench folder's plots are whole.
MAX_PLOT_SERIES = 20
# Cells of a section's instance x solver table (mapping: two tables): a folder from anyone may
# name another solver in every record, and 3,000 such records made a 72 MB report.md in 5.6 s
# (30,000 would make 7 GB); such a folder is refused before anything is written. A real bench's
# tables hold hundreds (30 instances x 6 solvers); 10,000 instances of every solver fit.
MAX_TABLE_CELLS = 1_000_000
TABLE_SECTIONS = ("mapping", "gradcode", "rollout")


def plot_name(instance: str) -> str:
    """The file name of an instance's Pareto plot: ``pareto_<instance, / as __>.png``; a name too
    long for a file name (an instance file's path, or a hostile record) is cut and a hash of the
    whole name added, so two long names still get two plots."""
    import hashlib

    stem = instance.replace("/", "__")
    if len(stem.encode()) > PLOT_NAME_MAX:
        digest = hashlib.sha256(instance.encode()).hexdigest()[:12]
        stem = stem.encode()[:PLOT_NAME_MAX].decode(errors="ignore") + "-" + digest
    return f"pareto_{stem}.png"


def _by_instance(records: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        out[r["instance"]].append(r)
    return out


def _first_by_solver(rs: list[dict]) -> dict[str, dict]:
    """Each solver's first record among ``rs`` (an instance's runs), the one its table cell shows."""
    out: dict[str, dict] = {}
    for r in rs:
        out.setdefault(r["solver"], r)
    return out


def _plotted(solvers: list[str]) -> set[str]:
    """The solvers a plot draws: the first ``MAX_PLOT_SERIES`` of the table's columns."""
    return set(solvers[:MAX_PLOT_SERIES])


def _series_note(solvers: list[str], what: str) -> list[str]:
    """The line saying that only the first solvers are drawn in ``what`` ([] when all are)."""
    if len(solvers) <= MAX_PLOT_SERIES:
        return []
    return [f"{what} show only the first {MAX_PLOT_SERIES} of the {len(solvers)} solvers (the table's first "
            "columns); the tables list them all.", ""]


def _reference(rs: list[dict], key: str, stored: dict | None = None) -> tuple[float | None, str]:
    """The certified reference of ``key`` for one instance's runs: the stored optimum
    (``stored``, a row of results/mapping/optima.csv) or the best proven optimum of the runs
    ("opt"), else the best certified lower bound known, from the stored row, an exact solver's
    run or a run that proved its bound ("lb"; records that say ``exact`` or ``bound_proven``),
    never above the best value found; (None, "-") when nothing certifies one. A heuristic's
    bound (the formulation's analytic one) never counts."""
    proven = [r["objectives"][key] for r in rs
              if r.get("quality") == "proven_optimal" and (r.get("objectives") or {}).get(key)]
    if stored and stored.get("status") == "optimal" and stored.get("value"):
        proven.append(stored["value"])
    if proven:
        return min(proven), "opt"
    bounds = [r["bound"][key] for r in rs
              if (r.get("exact") is True or r.get("bound_proven") is True) and (r.get("bound") or {}).get(key)]
    if stored and stored.get("bound"):
        bounds.append(stored["bound"])
    if not bounds:
        return None, "-"
    found = [r["objectives"][key] for r in rs if (r.get("objectives") or {}).get(key)]
    if stored and stored.get("value"):
        found.append(stored["value"])
    return min([max(bounds), *found]), "lb"


def _gap(value: float | None, ref: float | None) -> str:
    """The gap of ``value`` to the certified reference ``ref`` (a minimised objective), or "-"."""
    if value is None or not ref or value <= 0:
        return "-"
    return f"{100 * max(0.0, (value - ref) / value):.1f}%"


def _status(r: dict) -> str:
    """The record's termination, with which limit stopped a run cut short."""
    stopped = r.get("stopped_by")
    if r.get("termination") == "time_limit" and stopped in ("work", "time"):
        return f"{stopped} limit"
    return r.get("termination", "-")


def mapping_section(records: list[dict], out: Path, stored: dict | None = None) -> list[str]:
    """``stored``: (instance, objective key) -> row of the stored optima (the bench's snapshot)."""
    stored = stored or {}
    by_inst = _by_instance(records)
    solvers = sorted({r["solver"] for r in records})   # one order whatever order the runs ended in
    lines = ["## Operator mapping: heuristic vs exact", "",
             "Period (ms) per solver and its ratio to the instance's certified reference: the proven "
             "optimum (`opt`: stored in results/mapping/optima.csv, copied by the bench into this folder as "
             f"{SNAPSHOT}, or proven by a run here), else the best certified lower bound known (`lb`, flagged: "
             "no proof exists, the ratio overstates); `-` where nothing certifies one.", "",
             "Second table: each solver's gap to that same reference (a heuristic's own analytic bound is never "
             "used; `-` where there is no reference), its solve time and status; a run cut short says which "
             "limit stopped it: `work limit` (its work limit: CP-SAT deterministic time, NSGA-II evaluations, "
             "HiGHS nodes; the same result on any machine load) or `time limit` (the wall clock).", ""]
    table, gap_table, plots, fronts = [], [], [], 0
    drawn = _plotted(solvers)
    for inst, rs in by_inst.items():
        ref, tag = _reference(rs, "period_ms", stored.get((inst, "period_ms")))
        cells, gcells = [], []
        first = _first_by_solver(rs)
        for s in solvers:
            r = first.get(s)
            p = (r or {}).get("objectives", {}).get("period_ms")
            if r is None:
                cells.append("-")
                gcells.append("-")
                continue
            cells.append(_status(r) if p is None else
                         f"{p:.1f} (x{p / ref:.3f})" if ref else f"{p:.1f}")
            gcells.append(f"{_gap(p, ref)} / {cell(r.get('wall_time_s'), '.1f')} / {_status(r)}")
        table.append([inst, f"{cell(ref)} {tag}", *cells])
        gap_table.append([inst, *gcells])
        front = next((x["front"] for x in rs if x.get("front")), None)
        front = [p for p in front or () if p.get("period_ms") is not None and p.get("latency_ms") is not None]
        if front:
            fronts += 1
            if fronts > MAX_PARETO_PLOTS:
                continue
            name = plot_name(inst)
            pareto_plot(out / name, f"{inst}: period vs latency", "period_ms", "latency_ms",
                        approx={"nsga2": front},
                        points={x["solver"]: x["objectives"] for x in rs
                                if x.get("objectives") and not x.get("front") and x["solver"] in drawn})
            plots.append(f"![{inst}]({name})")
    lines += markdown_table(("instance", "reference", *solvers), table)
    lines += ["", *markdown_table(("instance", *(f"{s} gap to reference / time (s) / status" for s in solvers)),
                                  gap_table)]
    if plots:
        lines += ["", "Pareto plots (NSGA-II front and each solver's plan):", ""]
        if fronts > len(plots):
            lines += [f"Only the first {len(plots)} of the {fronts} instances with a front (in the table's order) are "
                      f"plotted, at most {MAX_PARETO_PLOTS} per report; the fronts of the others are in runs.jsonl.", ""]
        lines += _series_note(solvers, "The plots")
        lines += plots
    return lines + [""]


def rollout_section(records: list[dict], out: Path) -> list[str]:
    """Per round: each policy's trainer finish and its ratio to the offline optimum (or to the
    lower bound, flagged), waiting ratio and first dispatch; then the reproduction table
    (reductions vs the synchronous baseline, with the paper's bands)."""
    by_inst = _by_instance(records)
    policies = list(dict.fromkeys(r["solver"] for r in records))
    lines = ["## Rollout admission: policies vs the offline optimum", "",
             "Trainer finish (s) per policy and its ratio to the CP-SAT optimum (`opt`) or, when none was "
             "proven, to the best lower bound CP-SAT or `step-plan`'s step-indexed proof reported (`lb`, flagged; "
             "`-`: none); waiting ratio in parentheses. `step-plan` and `cpsat` are offline plans with known "
             "lengths; results/rollout/optimum_gaps.md has the longer study of the same bounds.", ""]
    table = []
    for inst, rs in by_inst.items():
        ref, tag = _reference(rs, "train_end_s")
        cells = []
        first = _first_by_solver(rs)
        for p in policies:
            r = first.get(p)
            o = (r or {}).get("objectives", {})
            if not o.get("train_end_s"):
                cells.append(_status(r) if r else "-")
                continue
            ratio = f" x{o['train_end_s'] / ref:.3f}" if ref else ""
            cells.append(f"{o['train_end_s']:.1f}{ratio} ({100 * o.get('waiting_ratio', 0):.0f}%)")
        table.append([inst, f"{cell(ref)} {tag}", *cells])
    lines += markdown_table(("round", "reference", *policies), table)
    repro = []
    for inst, rs in by_inst.items():
        by = {r["solver"]: r.get("objectives", {}) for r in rs}
        base = by.get("sync", {})
        if not base.get("train_end_s"):
            continue
        row = [inst, f"{100 * base.get('waiting_ratio', 0):.1f}%"]
        for p in ("cgp", "fgd-soft"):
            o = by.get(p, {})
            if o.get("train_end_s"):
                row.append(f"{100 * (o['train_end_s'] / base['train_end_s'] - 1):+.1f}%")
                w0 = base.get("waiting_ratio") or 0
                row.append(f"{100 * (o['waiting_ratio'] / w0 - 1):+.1f}%" if w0 else "-")
            else:
                row += ["-", "-"]
        repro.append(row)
    if repro:
        lines += ["", "### Reproduction: change vs the synchronous baseline (paper: end time -30.7% to -42.3%, "
                  "waiting ratio -37% to -76%, baseline waiting 47-52%)", "",
                  *markdown_table(("round", "sync waiting", "CGP end time", "CGP waiting", "CGP+FGD end time",
                                   "CGP+FGD waiting"), repro)]
    return lines + [""]


def gradcode_section(records: list[dict], out: Path) -> list[str]:
    """Per instance: expected / p95 / worst step time of each scheme and of the assignment
    solvers, the ratio of each to the best expected step time, and a bar chart."""
    from pipeplan.app.figures import bar_chart

    by_inst = _by_instance(records)
    solvers = sorted({r["solver"] for r in records})   # one order whatever order the runs ended in
    lines = ["## Gradient coding: constructions vs the assignment solvers", "",
             "Expected step time (s) per scheme, its ratio to the best expected step time of the instance, and "
             "the worst-case step time; the exact solvers' status. Time-to-target-loss training runs are in "
             "results/gradcode/ (`pipeplan gradcode study`).", ""]
    table = []
    chart: dict[str, dict[str, float]] = {}
    shown = _plotted(solvers)
    for inst, rs in by_inst.items():
        values = {r["solver"]: r["objectives"].get("expected_step_s") for r in rs if r.get("objectives")}
        best = min((v for v in values.values() if v), default=None)
        cells = []
        first = _first_by_solver(rs)
        for s in solvers:
            r = first.get(s)
            v = values.get(s)
            if r is None or v is None:
                cells.append((r or {}).get("termination", "-"))
                continue
            if not best:        # every scheme's expected step time is 0: no ratio
                cells.append(f"{v:.3f}")
                continue
            worst = r["objectives"].get("worst_step_s")
            tag = "" if r["termination"] in ("completed", "optimal") else f" {_status(r)}"
            cells.append(f"{v:.3f} (x{v / best:.2f}; worst {cell(worst)}){tag}")
        table.append([inst, *cells])
        chart[inst.split("/", 1)[-1]] = {s: v for s, v in values.items() if v and s in shown}
    lines += markdown_table(("instance", *solvers), table)
    if chart:
        drawn = dict(list(chart.items())[:MAX_BAR_GROUPS])
        bar_chart(out / "gradcode_step_time.png", "Gradient coding: expected step time per scheme", drawn,
                  ylabel="expected step time (s)")
        lines += [""]
        if len(chart) > len(drawn):
            lines += [f"Only the first {len(drawn)} of the {len(chart)} instances (in the table's order) are in the "
                      f"chart, at most {MAX_BAR_GROUPS} per report; the table lists them all.", ""]
        lines += _series_note(solvers, "The chart's bars")
        lines += ["![gradient coding step times](gradcode_step_time.png)"]
    lines += ["", "Training with each scheme (loss against time, stale gradients): `pipeplan gradcode study` "
                  "(results/gradcode/report.md); this report only reads the bench's records."]
    return lines + [""]


def multi_section(records: list[dict], out: Path) -> list[str]:
    """Per multi-network instance: each solver's value of its objective, status and gap."""
    from pipeplan.core.vocabulary import MULTI_OBJECTIVES

    lines = ["## Several DNNs on one SoC: exact vs heuristic joint plans", "",
             "Per instance and objective, each solver's value (fairness: least normalised throughput; rate: "
             "request rate every network sustains, fps), its status and gap to its bound. The full study, with "
             "fronts and the baselines' ratios, is results/multi/ (`pipeplan multi study`).", ""]
    table = []
    for inst, rs in _by_instance(records).items():
        for r in rs:
            objective = (r.get("params") or {}).get("objective", "fairness")
            key = MULTI_OBJECTIVES[objective].key if objective in MULTI_OBJECTIVES else ""
            value = (r.get("objectives") or {}).get(key)
            gap = r.get("gap")
            table.append([inst, objective, r["solver"], _status(r), cell(value), "-" if gap is None else f"{gap:.2%}",
                          cell(r.get("wall_time_s"), ".1f")])
    lines += markdown_table(("instance", "objective", "solver", "status", "value", "gap", "s"), table)
    return lines + [""]


SECTIONS = {"mapping": mapping_section, "gradcode": gradcode_section, "rollout": rollout_section,
            "multi": multi_section}


def _resumed(suite: dict) -> str:
    """A resumed bench's start is not its runs' start: say how many came from earlier ones."""
    before = suite.get("recorded_before")
    return f" (resumed: {before} of its runs were recorded before that)" if isinstance(before, int) and before > 0 else ""


def _planned_keys(suite: dict) -> list[str] | None:
    """The run keys of the bench's suite in planned order, or None: suite.json's ``planned``
    (the bench writes it), else, for a folder from before it did, the shipped suite of that name.
    Never the file suite.json's ``source`` names: the folder may come from anyone, and the report
    reads nothing outside it because of what it says."""
    from pipeplan.app.bench import SUITES_DIR, load_suite, plan_runs

    planned = suite.get("planned")
    if isinstance(planned, list) and all(isinstance(k, str) for k in planned):
        return planned
    name = suite.get("suite")
    if not (isinstance(name, str) and name.isidentifier() and (SUITES_DIR / f"{name}.toml").is_file()):
        return None
    try:
        return [r.key for r in plan_runs(load_suite(name)[1])]
    except (InputError, KeyError, OSError):
        return None


def _member(results_dir: Path, name: str) -> Path | None:
    """``results_dir/name``, None when there is none; refused when it is a link leading out of the
    folder (a bench folder may come from anyone: the report reads only files inside it)."""
    if not os.path.lexists(results_dir / name):
        return None
    return inside_folder(results_dir, name, str(results_dir), name)


def _suite_doc(results_dir: Path) -> dict:
    """suite.json of a bench folder ({} when there is none): an object, its ``machine`` one too."""
    path = _member(results_dir, "suite.json")
    if path is None:
        return {}
    suite = load_json(path)
    if not isinstance(suite, dict):
        raise InputError(str(path), "", f"expected an object, got {type(suite).__name__}")
    if not isinstance(suite.get("machine", {}), dict):
        raise InputError(str(path), "machine", f"expected an object, got {type(suite['machine']).__name__}")
    return suite


def in_plan_order(records: list[dict], planned: list[str] | None) -> list[dict]:
    """``records`` in the suite's planned order (instances, then solvers, as the suite lists
    them), not the order the runs ended in, so that the tables' rows and columns are the same
    whatever the machine's load; records the plan does not hold come after, by name."""
    from pipeplan.app.bench import record_key

    rank = {k: i for i, k in enumerate(planned or [])}
    return sorted(records, key=lambda r: (rank.get(record_key(r), len(rank)), r["system"], r["instance"],
                                          r["solver"], r["seed"]))


def _completeness(planned_keys: list[str] | None, recorded: int) -> str:
    """' (partial: ...)' when the suite plans more runs than are recorded."""
    if planned_keys is None:
        return ""
    planned = len(planned_keys)
    if recorded >= planned:
        return f" All {planned} planned runs are recorded."
    return (f" PARTIAL: {recorded} of the suite's {planned} runs are recorded; rerunning the same "
            f"command resumes with the {planned - recorded} missing runs.")


def limits_section(records: list[dict]) -> list[str]:
    """How closely each solver kept its time limit: the longest solve (``wall_time_s``, the
    solver call itself, without the process start) over its limit, per system and solver."""
    rows = defaultdict(list)
    for r in records:
        if r.get("time_limit") and r.get("wall_time_s") is not None:
            rows[r["system"], r["solver"]].append(r)
    if not rows:
        return []
    lines = ["## Time limits", "",
             "Longest solve over its time limit per solver (the solver call, start-up excluded); "
             "`at limit`: runs cut short (termination `time_limit`), of which `by work` were stopped by their "
             "work limit (machine-independent) and `by time` by the wall clock (`?`: the record does not say).",
             ""]
    table = []
    for (system, solver), rs in sorted(rows.items()):
        worst = max(rs, key=lambda r: r["wall_time_s"] / r["time_limit"])
        over = max(r["wall_time_s"] - r["time_limit"] for r in rs)
        cut = [r for r in rs if r["termination"] == "time_limit"]
        by_work = sum(r.get("stopped_by") == "work" for r in cut)
        by_time = sum(r.get("stopped_by") == "time" for r in cut)
        unknown = len(cut) - by_work - by_time
        table.append([system, solver, len(rs), len(cut), f"{worst['wall_time_s'] / worst['time_limit']:.2f}",
                      f"{max(0.0, over):.2f}", by_work, f"{by_time}" + (f" (+{unknown} ?)" if unknown else "")])
    lines += markdown_table(("system", "solver", "runs", "at limit", "longest solve / limit", "longest overrun (s)",
                             "by work", "by time"), table)
    return lines + [""]


def _check_table_sizes(by_system: dict[str, list[dict]], source: str) -> None:
    """Refuse a folder whose instance x solver tables would exceed ``MAX_TABLE_CELLS`` (before
    anything is drawn or written): names the system, its instances and solvers."""
    for system in TABLE_SECTIONS:
        rs = by_system.get(system, ())
        instances, solvers = len({r["instance"] for r in rs}), len({r["solver"] for r in rs})
        if instances * solvers > MAX_TABLE_CELLS:
            raise InputError(source, "solver", f"{solvers:,} {system} solvers over {instances:,} instances make a "
                                               f"table of {instances * solvers:,} cells, above the report's "
                                               f"{MAX_TABLE_CELLS:,}")


def write_report(results_dir: Path) -> str:
    """Write summary.csv, report.md and the plots of a bench folder; returns report.md.

    A damaged last line of runs.jsonl (a bench killed mid-write) is ignored with a one-line
    warning, not refused: the report never changes runs.jsonl, and it may read a folder whose
    bench is still appending; the next ``pipeplan bench`` on the folder sets the line aside and
    redoes its run. A damaged line before the last is an error naming it (``read_records``)."""
    records_path = _member(results_dir, RECORDS)
    if records_path is None:
        raise InputError(str(results_dir), RECORDS, "no bench records here (run `pipeplan bench` first)")
    records = read_records(records_path)
    if not records:
        raise InputError(str(records_path), "", "empty: no finished run recorded")
    suite = _suite_doc(results_dir)
    planned = _planned_keys(suite)
    records = in_plan_order(records, planned)
    m = suite.get("machine", {})
    counts = defaultdict(int)
    for r in records:
        counts[r["termination"]] += 1
    lines = [f"# pipeplan bench report: {suite.get('suite', results_dir.name)}", "",
             f"Command: `pipeplan bench --suite {suite.get('suite', '?')}` (engine {suite.get('engine', '?')}, "
             f"jobs {suite.get('jobs', '?')}); machine: {m.get('machine', '?')}, {m.get('cores', '?')} cores, "
             f"Python {m.get('python', '?')}; started {suite.get('started', '?')}{_resumed(suite)}.", "",
             f"{len(records)} runs: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + "."
             + _completeness(planned, len(records)), ""]
    by_system: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_system[r["system"]].append(r)
    _check_table_sizes(by_system, str(records_path))
    with staged_folder(results_dir, ours=(RECORDS,)) as stage:     # report.md, summary.csv and plots appear together
        snapshot = _member(results_dir, SNAPSHOT)
        stored = references(read_optima(snapshot)) if snapshot else {}
        for system, rs in by_system.items():
            section = SECTIONS.get(system)
            if system == "mapping":
                lines += mapping_section(rs, stage, stored)
            else:
                lines += section(rs, stage) if section else [f"## {system}", "", "(no report section)", ""]
        lines += limits_section(records)
        errors = [r for r in records if r["termination"] == "error" or str(r.get("message", "")).startswith("killed")]
        if errors:
            lines += ["## Runs that failed or were stopped", ""]
            # one line each: a record's message "boom\n\n# Heading" had added a heading to the report
            lines += [f"- {r['system']} {r['instance']} {r['solver']} seed {r['seed']}: {r['termination']}: "
                      f"{single_line(r.get('message') or '') or '(no message)'}" for r in errors]
        md = "\n".join(lines) + "\n"
        write_atomic(stage / "summary.csv", summary_csv(records))
        write_atomic(stage / "report.md", md)
    return md
