"""The measured whole-network runs of the Khadas VIM3 (instances/khadas-vim3/evaluations.csv)."""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from pipeplan.instances.paths import INSTANCES_DIR

EVALUATIONS_CSV = INSTANCES_DIR / "khadas-vim3" / "evaluations.csv"


@dataclass(frozen=True)
class MeasuredRun:
    instance: str
    mapping: str
    mode: str
    freq: str
    period_ms: float
    latency_ms: float
    energy_mj: float
    source_file: str

    @property
    def label(self) -> str:
        return f"{self.instance.split('/')[-1]}:{self.mapping}:{self.mode}:{self.freq}"


def measured_runs(path: Path = EVALUATIONS_CSV) -> list[MeasuredRun]:
    with path.open() as fh:
        rows = csv.DictReader(line for line in fh if not line.startswith("#"))
        return [MeasuredRun(r["instance"], r["mapping"], r["mode"], r["freq"], float(r["measured_period_ms"]),
                            float(r["measured_latency_ms"]), float(r["measured_energy_mj"]), r["source_file"])
                for r in rows]

