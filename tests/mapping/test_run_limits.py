"""`pipeplan run` on hostile manifests keeps its limits: dtypes are plain numbers. The corpus
(tests/bad_inputs/manifest/, cases_run.toml) holds the cases git can store."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from pipeplan.core.errors import InputError
from pipeplan.deploy.manifest import DTYPES, MANIFEST_FILE, load_manifest
from tests.cli_helpers import ROOT

GOOD = ROOT / "tests" / "bad_inputs" / "good" / "manifest"


def edit(folder: Path, change) -> None:
    doc = json.loads((folder / MANIFEST_FILE).read_text())
    change(doc)
    (folder / MANIFEST_FILE).write_text(json.dumps(doc))


# ------------------------------------------------------------------------------------ dtypes

@pytest.mark.parametrize("text", [d.name for d in DTYPES] + ["f4", "float", "i8", "?", "<f4" if sys.byteorder == "little" else ">f4"])
def test_plain_numeric_dtypes_load(tmp_path, text):
    folder = shutil.copytree(GOOD, tmp_path / "export")
    edit(folder, lambda doc: doc["inputs"][0].update(dtype=text))
    assert load_manifest(folder).inputs[0].dtype in DTYPES


@pytest.mark.parametrize("text, why", [
    ("i4,(", "unknown dtype"), ("10000000000000i4", "unknown dtype"), ("(" * 5000, "unknown dtype"),
    ("(15000,15000)f4", "plain numeric or bool"), ("i4,i4", "plain numeric or bool"),
    ("O", "plain numeric or bool"), ("U8", "plain numeric or bool"), ("V16", "plain numeric or bool"),
    ("M8[s]", "plain numeric or bool"), ("f16", "dtype"),   # float128, where numpy has it
    (">f4" if sys.byteorder == "little" else "<f4", "plain numeric or bool")])
def test_other_dtypes_are_the_fields_error(tmp_path, text, why):
    """numpy's parser raises SyntaxError, ValueError or TypeError; a subarray, structured,
    object, string, void, datetime, 128-bit float or byte-swapped dtype parses but is no tensor
    ONNX Runtime takes, and a subarray's elements are not counted by the shape."""
    folder = shutil.copytree(GOOD, tmp_path / "export")
    edit(folder, lambda doc: doc["stages"][0]["groups"][0]["outputs"][0].update(dtype=text))
    with pytest.raises(InputError) as info:
        load_manifest(folder)
    assert info.value.field == "stages[0].groups[0].outputs[0].dtype" and why in info.value.message
