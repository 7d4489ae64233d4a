"""The report's gaps are honest: taken against the instance's certified reference (the best
proven optimum, else the best lower bound an exact solver reported), never a heuristic's own
analytic bound; not shown where nothing is certified; the status says which limit stopped a
run; the tables do not depend on the order the runs ended in."""
import json
import random

from pipeplan.app.bench import run_suite
from pipeplan.app.report import limits_section, mapping_section, write_report
from pipeplan.app.stored_optima import SNAPSHOT, read_optima, references


def rec(instance, solver, period, *, exact, bound=None, quality="feasible", termination="completed",
        stopped_by=None, gap=None, wall=1.0):
    return {"system": "mapping", "instance": instance, "solver": solver, "seed": 0, "time_limit": 10.0,
            "exact": exact, "termination": termination, "quality": quality, "stopped_by": stopped_by,
            "objectives": {"period_ms": period}, "bound": {"period_ms": bound} if bound is not None else {},
            "gap": gap, "wall_time_s": wall, "message": "", "front": [], "versions": {}}


RECORDS = [
    # a proven optimum; the heuristic reaches it, but its own analytic bound (25) says 37.5%
    rec("net/a", "cpsat", 40.0, exact=True, bound=40.0, quality="proven_optimal", termination="optimal", gap=0.0),
    rec("net/a", "pipeline-dp", 40.0, exact=False, bound=25.0, gap=0.375),
    rec("net/a", "heft", 50.0, exact=False, bound=25.0, gap=0.5),
    # nothing proven: the exact run's bound (30) is the reference, not the heuristic's (35, say)
    rec("net/b", "cpsat", 45.0, exact=True, bound=30.0, termination="time_limit", stopped_by="work", gap=1 / 3),
    rec("net/b", "pipeline-dp", 40.0, exact=False, bound=35.0, gap=0.125),
    rec("net/b", "heft", 60.0, exact=False, bound=35.0, gap=35 / 60, termination="time_limit", stopped_by="time"),
    # no exact run: no reference, no gap
    rec("net/c", "pipeline-dp", 40.0, exact=False, bound=20.0, gap=0.5),
    rec("net/c", "heft", 44.0, exact=False, bound=20.0, gap=0.55),
]


def rows(lines, first_column):
    out = {}
    for line in lines:
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if cells and cells[0] == first_column:
            out.setdefault(first_column, []).append(cells)
    return out[first_column]


def tables(tmp_path):
    lines = mapping_section(RECORDS, tmp_path)
    header = next(line for line in lines if line.startswith("| instance | reference"))
    solvers = [c.strip() for c in header.split("|")[3:-1]]
    period, gaps = {}, {}
    for inst in ("net/a", "net/b", "net/c"):
        first, second = rows(lines, inst)
        period[inst] = dict(zip(["reference", *solvers], first[1:]))
        gaps[inst] = dict(zip(solvers, (c.split(" / ") for c in second[1:])))
    return lines, period, gaps


def test_heuristic_at_the_proven_optimum_has_no_gap(tmp_path):
    _, period, gaps = tables(tmp_path)
    assert period["net/a"]["reference"] == "40.00 opt"
    assert gaps["net/a"]["pipeline-dp"][0] == "0.0%"      # not the record's 37.5%
    assert gaps["net/a"]["heft"][0] == "20.0%"             # (50 - 40) / 50, not 50%
    assert gaps["net/a"]["cpsat"][0] == "0.0%"


def test_without_a_proof_the_reference_is_the_best_exact_bound(tmp_path):
    _, period, gaps = tables(tmp_path)
    assert period["net/b"]["reference"] == "30.00 lb"      # the heuristics' 35 is not certified
    assert gaps["net/b"]["pipeline-dp"][0] == "25.0%"      # (40 - 30) / 40
    assert gaps["net/b"]["cpsat"][0] == "33.3%"
    assert period["net/b"]["pipeline-dp"] == "40.0 (x1.333)"


def test_no_certified_reference_no_gap(tmp_path):
    _, period, gaps = tables(tmp_path)
    assert period["net/c"]["reference"] == "- -"
    assert gaps["net/c"]["pipeline-dp"][0] == "-" and gaps["net/c"]["heft"][0] == "-"
    assert period["net/c"]["heft"] == "44.0"


def test_status_says_which_limit_stopped_a_run_and_the_text_says_what_gaps_are(tmp_path):
    lines, _, gaps = tables(tmp_path)
    assert gaps["net/b"]["cpsat"][2] == "work limit" and gaps["net/b"]["heft"][2] == "time limit"
    assert gaps["net/a"]["cpsat"][2] == "optimal"
    text = " ".join(lines)
    assert "certified reference" in text and "analytic bound is never used" in text
    limits = limits_section(RECORDS)
    row = next(line for line in limits if line.startswith("| mapping | cpsat"))
    assert [c.strip() for c in row.split("|")[3:9]] == ["2", "1", "0.10", "0.00", "1", "0"]


def test_a_bound_above_the_best_value_is_never_the_reference(tmp_path):
    bad = [rec("net/d", "milp", 40.0, exact=True, bound=41.0, termination="time_limit", stopped_by="time"),
           rec("net/d", "heft", 40.5, exact=False)]
    lines = mapping_section(bad, tmp_path)
    first, _ = rows(lines, "net/d")
    assert first[1] == "40.00 lb"


def test_tables_do_not_depend_on_the_order_runs_ended(tmp_path):
    reports = []
    for i in range(3):
        out = tmp_path / f"r{i}" / "out"
        out.mkdir(parents=True)
        shuffled = RECORDS[:]
        random.Random(i).shuffle(shuffled)
        (out / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in shuffled))
        reports.append(write_report(out))
    assert reports[0] == reports[1] == reports[2]


def test_bench_records_say_which_limit_stopped_each_run(tmp_path):
    suite = tmp_path / "suite.toml"
    suite.write_text('[[mapping]]\ninstances = ["khadas-vim3/SqueezeV1", "a311d/inception_v1"]\n'
                     'solvers = ["cpsat"]\ntime_limit = 60\nparams = {work_limit = 0.3}\n'
                     '[[mapping]]\ninstances = ["khadas-vim3/SqueezeV1", "a311d/inception_v1"]\n'
                     'solvers = ["pipeline-dp"]\ntime_limit = 60\n')
    out = tmp_path / "out"
    run_suite(str(suite), out, jobs=2)
    by = {(r["instance"], r["solver"]): r for r in map(json.loads, (out / "runs.jsonl").read_text().splitlines())}
    squeeze, bst = by["khadas-vim3/SqueezeV1", "cpsat"], by["a311d/inception_v1", "cpsat"]
    assert squeeze["termination"] == "optimal" and squeeze["stopped_by"] is None and squeeze["exact"] is True
    assert bst["termination"] == "time_limit" and bst["stopped_by"] == "work", bst["message"]
    assert bst["params"]["work_limit"] == 0.3 and bst["params"]["work"] >= 0.3
    assert by["a311d/inception_v1", "pipeline-dp"]["exact"] is False
    md = write_report(out)
    assert "work limit" in md and "| khadas-vim3/SqueezeV1 | 40.72 opt |" in md
    # the heuristic's gap is to the stored optimum (copied into the folder by the bench), else to
    # the exact run's certified bound, never to its own analytic bound
    dp = by["a311d/inception_v1", "pipeline-dp"]["objectives"]["period_ms"]
    stored = references(read_optima(out / SNAPSHOT)).get(("a311d/inception_v1", "period_ms"))
    if stored and stored["status"] == "optimal":
        ref = stored["value"]
    else:
        ref = min(bst["bound"]["period_ms"], dp, bst["objectives"]["period_ms"])
    _, gap_row = rows(md.splitlines(), "a311d/inception_v1")
    assert gap_row[2].startswith(f"{100 * (dp - ref) / dp:.1f}% / ")
    assert gap_row[1].endswith("/ work limit")


def test_a_proven_bound_of_a_non_exact_solver_counts_an_analytic_one_does_not():
    """step-plan with ``prove_s`` reports HiGHS's dual bound (``bound_proven``): the reference;
    a policy's analytic bound, higher here, is not."""
    from pipeplan.app.report import _reference

    def run(solver, end, bound, *, exact=False, proven=False):
        return {"solver": solver, "exact": exact, "bound_proven": proven, "objectives": {"train_end_s": end},
                "bound": {"train_end_s": bound}}

    records = [run("cpsat", 240.0, 200.0, exact=True), run("step-plan", 230.0, 221.0, proven=True),
               run("cgp", 260.0, 225.0)]
    assert _reference(records, "train_end_s") == (221.0, "lb")
    assert _reference(records[:1] + records[2:], "train_end_s") == (200.0, "lb")
