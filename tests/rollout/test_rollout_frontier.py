"""The frontier-width study: on the paper's engine a hard gate of 16 groups finishes earlier
than CGP, the gain goes with the attention term, and the command refuses bad input in one line."""
from pipeplan.app.studies.rollout_frontier import frontier_markdown, frontier_study
from tests.cli_helpers import assert_input_error, run_cli


def test_a_sixteen_group_gate_beats_cgp_through_the_attention_term():
    rows = frontier_study(workloads=("sci-xw",), Rs=(32,), frontiers=(2, 16), seeds=1)
    narrow, gate = rows
    assert narrow["hard_gain"] > 0.3                       # two groups starve the engine
    assert gate["hard_gain"] < -0.02                       # sci-xw R = 32, seed 0: -3.7% (-11.5% with the
                                                           # unmeasured within-prompt spread before 2026-12-03)
    assert gate["hard_gain_no_attention"] > gate["hard_gain"] + 0.03     # +0.8% without the attention term
    assert abs(gate["soft_gain"]) < 0.01
    assert gate["step_plan_gain"] < gate["hard_gain"]      # the offline planner does better still
    md = frontier_markdown(rows, "pipeplan rollout frontier", 1)
    assert "| sci-xw | 32 |" in md and "F_w = 16" in md


def test_an_unknown_workload_is_one_line_and_exit_2(tmp_path):
    proc = run_cli("rollout", "frontier", "--workloads", "nope", "--out", str(tmp_path / "out"))
    assert_input_error(proc, "nope")
    assert not (tmp_path / "out").exists()
