"""The one table writer: exact markdown and CSV text."""
import pytest

from pipeplan.core.tables import cell, csv_text, markdown_table


def test_cell_formats_floats_only():
    assert cell(None) == "-"
    assert cell(None, none="") == ""
    assert cell(None, ".3g", none="not reached") == "not reached"
    assert cell(3.14159) == "3.14"
    assert cell(3.14159, ".1f") == "3.1"
    assert cell(12345.678, ".4g") == "1.235e+04"
    assert cell(3) == "3"                 # ints are shown as they are, not as 3.00
    assert cell("optimal") == "optimal"
    assert cell(True) == "True"


def test_markdown_table_default_and_aligned():
    assert markdown_table(("a", "b"), [(1, "x"), (2.5, "")]) == [
        "| a | b |", "|---|---|", "| 1 | x |", "| 2.5 |  |"]
    assert markdown_table(("system", "size", "gap"), [("m", "2,000", "0.010")], align="lrr") == [
        "| system | size | gap |", "|---|---:|---:|", "| m | 2,000 | 0.010 |"]
    assert markdown_table(("a",), []) == ["| a |", "|---|"]
    with pytest.raises(ValueError, match=r"align 'l': need one of l/r per column \(2\)"):
        markdown_table(("a", "b"), [], align="l")
    with pytest.raises(ValueError, match=r"align 'c': need one of l/r per column \(1\)"):
        markdown_table(("a",), [], align="c")


def test_csv_text_formats_none_and_extra_keys():
    rows = [{"name": "a,b", "x": 1 / 3, "t": 12.34567, "n": 7, "ok": True, "unused": 1.0},
            {"name": "c", "x": None, "t": 0.5},
            {"x": 1e-7}]
    assert csv_text(rows, ("name", "x", "t", "n", "ok")) == (
        "name,x,t,n,ok\r\n"
        '"a,b",0.333333,12.3457,7,True\r\n'
        "c,,0.5,,\r\n"
        ",1e-07,,,\r\n")
    assert csv_text(rows[:2], ("x", "t"), float_format=".4f", formats={"t": ".4g"}) == (
        "x,t\r\n0.3333,12.35\r\n,0.5\r\n")
    assert csv_text([], ["a", "b"]) == "a,b\r\n"
