"""Importer for the Khadas VIM3 (Amlogic A311D) board measurements.

Reads the raw CSV files of ``../shared/data/khadas-vim3`` once and writes pipeplan's own files,
which are committed so a clean clone needs no ``../shared``:

* ``profiles/data/khadas-vim3/<Graph>.json``: block-level profiles (time and board power per
  block, PU and DVFS level; input/output stages; measured transfers);
* ``instances/khadas-vim3/<Graph>.json``: block-chain mapping instances using those profiles;
* ``instances/khadas-vim3/evaluations.csv``: the measured whole-network runs, in pipeplan's
  terms (mapping string, mode, frequency spec, measured period/latency/energy).

Source of every number: public repository Ehsan-aghapour/CO-UP-Profiling at commit
22005a9d8742a71fb9e03e6e1484359984084a12 (Profiling/Data and
Profiling/ParaPipe/Profiling/Data/Yujie_Parapipe), as copied into ../shared/data/khadas-vim3.

Decisions (also written into each file's ``notes``):

* Two measurement campaigns exist. ``layers_dvfs.csv`` (CO-UP) has every DVFS level for Alex,
  Google, MobileV1, ResV1_50, SqueezeV1, YOLOv3; ``inception_blocks.csv`` (Para-Pipe) has the top
  level only for Google, InceptionV3, InceptionV4, InceptionResnetV2. The serial evaluations
  match the first campaign and the pipelined GoogLeNet runs the second (their block times differ
  by up to 2x on the GPU), so GoogLeNet gets two instances: ``Google`` (CO-UP, DVFS) and
  ``Google-parapipe`` (Para-Pipe, top level).
* DVFS level names: L "0".."5", B "0".."7", N "0".."7" (NPU level = host level, as measured),
  G "g.h" = GPU level g with host CPU level h (the GPU rows carry Freq_Host): "0.0" .. "4.7".
  A level cell is the whole number it holds (1e0, 1.0 and " 1" are level "1"), so one level has
  one name; a block measured twice at one PU, level and metric is refused.
* Transfers are measured per block output and PU pair (median of the repeated rows). The
  Para-Pipe-only graphs have none: they get the median of each PU pair over all measured
  transfers. Transfers to or from the NPU were not measured: charged 0 ms (the NPU rows'
  block times include their own tensor fill and read-back).
* The output stage has no measured power: it is charged at the board power of the last block
  on the same PU and level. Transfer power: median of transfer_freq.csv's transfer_power.
* A block (or input stage) whose time was measured and whose power cell is empty (YOLOv3's
  blocks 57, 58, 65 and 66 on the NPU, at every level) gets the median board power of the
  blocks measured on the same PU and level; the profile's notes name every such cell. Charged
  0 mW, as they had been, they looked cheaper than the board's static power.
* ``transfers.csv`` was measured at the top frequencies. How a copy's time and power change with
  frequency comes from transfer_freq.csv (one 14400-element kernel per sender/receiver pair and
  level): it depends on the CPU that does the copy, the receiver (for the GPU, its host CPU), so
  ``transfers.level_scaling`` holds, per pair, that CPU's level -> (time, power) relative to its
  top level. Pairs it does not cover (G->L, anything with the NPU) keep their top-level figures.
* The fitted parameters (switch costs, NPU re-entry and whole-graph share, static power and
  concurrent power share) come from pipeplan.profiles.khadas_costmodel, run on the derived
  evaluations.csv and switching_runs.csv.
"""
from __future__ import annotations

import ast
import statistics
from collections import defaultdict
from pathlib import Path

from pipeplan.core.errors import InputError
from pipeplan.core.io import inside_folder, parse_number, read_csv, staged_folder, write_atomic, write_json
from pipeplan.formulations.mapping.graph_limits import MAX_UNITS
from pipeplan.formulations.mapping.profile import profile_from_dict
from pipeplan.profiles.khadas_costmodel import fitted_documents, read_runs

SOURCE = ("Khadas VIM3 (Amlogic A311D) measurements, public repository Ehsan-aghapour/CO-UP-Profiling "
          "at commit 22005a9d8742a71fb9e03e6e1484359984084a12 (Profiling/Data, "
          "Profiling/ParaPipe/Profiling/Data/Yujie_Parapipe); board power by INA260; imported by "
          "pipeplan.profiles.khadas_import")
PU_INFO = {
    "L": ("cpu", "2x Cortex-A53 (LITTLE)"),
    "B": ("cpu", "4x Cortex-A73 (big)"),
    "G": ("gpu", "Mali-G52 MP4"),
    "N": ("npu", "NPU (5 TOPS INT8)"),
}
PU_ORDER = ("L", "B", "G", "N")
DVFS_GRAPHS = ("Alex", "Google", "MobileV1", "ResV1_50", "SqueezeV1", "YOLOv3")
PARAPIPE_GRAPHS = {"Google": "Google-parapipe", "InceptionV3": "InceptionV3",
                   "InceptionV4": "InceptionV4", "InceptionResnetV2": "InceptionResnetV2"}
HOST_PU = "B"  # the host CPU cluster in every evaluation ("host": "BB")


def _level_name(comp: str, freq: str, freq_host: str) -> str:
    if freq == "max":
        return "max"
    return f"{freq}.{freq_host}" if comp == "G" else freq


def _level_key(name: str) -> tuple:
    return tuple(int(x) for x in name.split(".")) if name != "max" else (10**9,)


class _Row(dict):
    """A CSV row keyed by its header, knowing its file and line, so that a missing or bad cell
    is a one-line error naming both (the source folder may come from anyone)."""

    def __init__(self, cells: dict, source: str, line: int):
        super().__init__(cells)
        self.source, self.line = source, line

    def field(self, column: str) -> str:
        return f"line {self.line}: {column}"

    def error(self, column: str, message: str) -> InputError:
        return InputError(self.source, self.field(column), message)

    def __missing__(self, column: str):
        raise self.error(column, "missing cell (or column)")

    def number(self, column: str) -> float:
        return parse_number(self[column], self.source, self.field(column))

    def whole(self, column: str) -> int:
        return parse_number(self[column], self.source, self.field(column), integer=True)

    def block(self, column: str = "Layer") -> int:
        """A block index, 0 to MAX_UNITS - 1: -5 and 1e308 had been written as units b-5 and a
        309-digit name, an instance and profile that pipeplan's own loader then refused."""
        value = self.whole(column)
        if not 0 <= value < MAX_UNITS:
            raise self.error(column, f"a block index is from 0 to {MAX_UNITS - 1:,}, got {value}")
        return value

    def measure(self, column: str, *, positive: bool = False) -> float:
        """A measured time, power or ratio: finite and at least 0 (above 0 with ``positive``, a
        ratio divided by: 0 had been a ZeroDivisionError traceback), named by file, line and
        column (a negative one had been named by the profile's field only)."""
        value = self.number(column)
        if value < 0 or (positive and value == 0):
            raise self.error(column, f"must be {'above' if positive else 'at least'} 0, got {value}")
        return value

    def level(self, column: str) -> str:
        """A DVFS level cell as its canonical text: ``max``, or the whole number it holds written
        plainly. ``1e0``, ``1.0`` and `` 1`` are level ``1`` (as they are block 1 in the Layer
        column): a cell ``0.0`` had made a second level "0.0" beside "0", and ``1e0`` a traceback."""
        return "max" if self[column] == "max" else str(self.whole(column))


def _csv_dicts(src: Path, name: str) -> list[_Row]:
    """Rows of the measurement CSV ``src / name`` keyed by its header (read with
    pipeplan.core.io's checks). The file must lie inside ``src`` after links: a link to a file
    elsewhere had been read, and its cells quoted in the error."""
    path = src / name
    rows = read_csv(inside_folder(src, name, str(path), "file"), what="measurement CSV")
    if not rows:
        return []
    header = rows[0][1]
    return [_Row(dict(zip(header, cells)), str(path), line) for line, cells in rows[1:]]


def _read_rows(src: Path, name: str):
    return [r for r in _csv_dicts(src, name) if r.get("Graph")]


def _build_profile(name: str, rows: list[dict], transfers: dict, pair_medians: dict,
                   transfer_power: float, campaign: str) -> dict:
    blocks = sorted({r.block() for r in rows if r["Metric"] == "task"})
    units = [f"b{i}" for i in blocks]
    col = {b: i for i, b in enumerate(blocks)}
    comps = [c for c in PU_ORDER if any(r["Component"] == c for r in rows)]
    levels: dict[str, set[str]] = defaultdict(set)
    task: dict[tuple, tuple[float, float | None]] = {}
    phases: dict[tuple, float] = {}
    phase_power: dict[tuple, float] = {}
    measured_on: dict[tuple, int] = {}          # (PU, level, block, metric) -> its line
    for r in rows:
        comp = r["Component"]
        freq = r.level("Freq")                  # a level is a whole number (or max)
        host = r.level("Freq_Host") if comp in ("G", "N") else ""
        if comp == "N" and freq != host:
            continue
        if comp == "G" and (freq == "max") != (host == "max"):
            raise r.error("Freq_Host", f"a GPU level pairs two whole numbers or max with max, got "
                                       f"{r['Freq']!r} with host {r['Freq_Host']!r}")
        lv = _level_name(comp, freq, host)
        levels[comp].add(lv)
        layer, metric = r.block(), r["Metric"]
        # one row per block, PU, level and metric: a level written two ways (0 and 0.0) is one
        # level, and its second row had silently replaced the first
        first = measured_on.setdefault((comp, lv, layer, metric), r.line)
        if first != r.line:
            raise r.error("Freq", f"{comp} level {lv}, block {layer}, {metric} measured again "
                                  f"(first on line {first})")
        t = r.measure("Time")
        p = r.measure("Power") if r["Power"] else None
        if metric == "task":
            task[(comp, lv, layer)] = (t, p)
        elif metric == "in" and layer == blocks[0]:
            phases[("in", comp, lv)] = t
            phase_power[("in", comp, lv)] = p
        elif metric == "out" and layer == blocks[-1]:
            phases[("out", comp, lv)] = t
    doc_pus, time_ms, power_mw, in_stage, out_stage = {}, {}, {}, {}, {}
    imputed: dict[str, dict[str, list[int]]] = {}   # PU -> level -> blocks whose power was not measured
    for comp in comps:
        lvls = sorted(levels[comp], key=_level_key)
        kind, desc = PU_INFO[comp]
        doc_pus[comp] = {"kind": kind, "levels": lvls, "idle_power_mw": 0.0, "description": desc}
        time_ms[comp], power_mw[comp] = {}, {}
        for lv in lvls:
            cells = [task.get((comp, lv, b)) for b in blocks]
            if all(c is None for c in cells):
                continue
            time_ms[comp][lv] = [c[0] if c else None for c in cells]
            try:
                power_mw[comp][lv], missing = stand_in_powers(cells)
            except ValueError as e:
                raise InputError(rows[0].source, f"Power ({name} on {comp} level {lv})", str(e)) from None
            if missing:
                imputed.setdefault(comp, {})[lv] = [blocks[i] for i in missing]
            if ("in", comp, lv) in phases:      # an unmeasured input power: as a block's, above
                in_power = phase_power[("in", comp, lv)]
                in_stage.setdefault(comp, {})[lv] = {
                    "time_ms": phases[("in", comp, lv)],
                    "power_mw": statistics.median(p for p in power_mw[comp][lv] if p is not None)
                    if in_power is None else in_power}
            if ("out", comp, lv) in phases and cells[-1] is not None:
                out_stage.setdefault(comp, {})[lv] = {"time_ms": phases[("out", comp, lv)],
                                                     "power_mw": power_mw[comp][lv][-1]}
    measured = {}
    for (layer, src, dst), t in sorted(transfers.items()):
        if layer in col and src in comps and dst in comps:
            measured.setdefault(f"b{layer}", {})[f"{src}->{dst}"] = t
    pairs = {k: {"fixed_ms": v, "ms_per_mb": 0.0} for k, v in pair_medians.items()
             if k.split("->")[0] in comps and k.split("->")[1] in comps}
    doc = {
        "schema": "pipeplan.profile/1",
        "name": f"khadas-vim3/{name}",
        "source": SOURCE,
        "notes": (f"Campaign: {campaign}. Block-level times (ms) and whole-board power (mW) per block, "
                  "PU and DVFS level. G levels are 'gpu.host'. Transfers to/from the NPU were not "
                  "measured (0 ms)." + _imputed_note(imputed)
                  + " See pipeplan.profiles.khadas_import for every decision."),
        "power_model": "board",
        "host_pu": HOST_PU,
        "pus": doc_pus,
        "units": units,
        "time_ms": time_ms,
        "power_mw": power_mw,
        "input_stage": in_stage,
        "output_stage": out_stage,
        "transfers": {"measured": measured if transfers else {}, "pairs": {} if transfers else pairs,
                      "default": {"fixed_ms": 0.0, "ms_per_mb": 0.0}, "power_mw": transfer_power},
    }
    profile_from_dict(doc, f"khadas-vim3/{name}")  # validate before anything is written
    return doc


def stand_in_powers(cells: list[tuple[float, float | None] | None]) -> tuple[list[float | None], list[int]]:
    """One PU level's board powers from its (time, power) cells, block by block (None: not run
    there), and the indices whose power was stood in for. A block whose time was measured and
    whose power cell is empty gets the median board power of the other blocks measured on the
    same PU and level. Left empty, it had been charged 0 mW: below the board's static power, so
    a plan that put such a block there looked cheaper than any measured one (YOLOv3's blocks 57,
    58, 65 and 66 on the NPU). Why that median: the board's power depends on the PU and its
    level far more than on the block (left out one at a time, the measured NPU blocks are
    predicted within 0.85% at the median; docs/cost-model.md). ValueError if no block of the
    level has a measured power."""
    measured = [c[1] for c in cells if c and c[1] is not None]
    missing = [i for i, c in enumerate(cells) if c and c[1] is None]
    if missing and not measured:
        raise ValueError(f"no block has a measured power to stand in for the {len(missing)} empty cell(s)")
    stand_in = statistics.median(measured) if missing else None
    return [None if not c else (stand_in if c[1] is None else c[1]) for c in cells], missing


def _imputed_note(imputed: dict[str, dict[str, list[int]]]) -> str:
    """The profile's own record of which powers are not measurements."""
    parts = []
    for comp, by_level in imputed.items():
        for blocks in sorted({tuple(v) for v in by_level.values()}):
            levels = [lv for lv, v in by_level.items() if tuple(v) == blocks]
            parts.append(f"{', '.join(f'b{b}' for b in blocks)} on {comp} at level(s) {', '.join(levels)}")
    if not parts:
        return ""
    return (" Board power not measured for " + "; ".join(parts) + ": each is the median board power "
            "of the other blocks measured on that PU and level.")


def _instance(name: str, n_blocks: int) -> dict:
    units = [{"name": f"b{i}", "op": "block"} for i in range(n_blocks)]
    return {
        "schema": "pipeplan.mapping-instance/1",
        "name": f"khadas-vim3/{name}",
        "source": SOURCE,
        "graph": {"units": units,
                  "edges": [{"src": f"b{i}", "dst": f"b{i + 1}", "bytes": None} for i in range(n_blocks - 1)]},
        "profile": f"../../profiles/data/khadas-vim3/{name}.json",
    }


def _freq_spec(r: _Row) -> str | None:
    """The measured ``freq`` column in pipeplan's --freq form: max, min, or one level per block."""
    try:
        return _parsed_freq(ast.literal_eval(r["freq"]), r["order"])
    except (ValueError, TypeError, SyntaxError, IndexError, MemoryError, RecursionError):
        raise r.error("freq", f"not a measured frequency setting: {r['freq']!r}") from None


def _parsed_freq(parsed, order: str) -> str | None:
    flat = parsed[0] if isinstance(parsed[0], tuple) and isinstance(parsed[0][0], str) else parsed
    if isinstance(flat[0], str):
        return flat[0].strip("{}")
    if len(parsed) != len(order):
        return None
    return ",".join(".".join(_level_text(x) for x in lv) if c == "G" else _level_text(lv[0])
                    for c, lv in zip(order, parsed))


def _level_text(level) -> str:
    """A level of a measured frequency setting as the profiles name it: 7.0 is level "7" (it had
    been a level "7.0" no profile has, and the run was fitted against another setting); text,
    fractions, NaN and infinities raise ValueError (InputError is one)."""
    return str(parse_number(level, "", "", integer=True))


# Random layer-switching runs of YOLOv3 (one-frame time only, no energy, no pipelined period):
# a different campaign from the whole-network evaluations, written to switching_runs.csv.
SWITCHING_RUNS = "serial_YOLOv3_switching.csv"


def _evaluations(src: Path) -> list[dict]:
    out = []
    for path in sorted((src / "evaluations").glob("*.csv")):
        if path.name == SWITCHING_RUNS:
            continue
        pipelined_file = path.name.startswith("pipelined")
        for r in _csv_dicts(src, f"evaluations/{path.name}"):
            freq = _freq_spec(r)
            if freq is None:
                continue
            latency, period = r.number("total_time"), r.number("pipelinetime")
            multi_stage = any(a != b for a, b in zip(r["order"], r["order"][1:]))
            mode = "pipelined" if (pipelined_file or period < latency * 0.999) and multi_stage else "serial"
            graph = "Google-parapipe" if pipelined_file and r["graph"] == "Google" else r["graph"]
            out.append({"instance": f"khadas-vim3/{graph}", "mapping": r["order"], "mode": mode,
                        "freq": freq, "measured_period_ms": period, "measured_latency_ms": latency,
                        "measured_energy_mj": r.number("total_e"), "measured_power_mw": r.number("task_power"),
                        "source_file": path.name})
    return out


def _switching_runs(src: Path) -> list[dict]:
    """The layer-switching runs: serial, one-frame time only (their energy was not recorded)."""
    out = []
    for r in _csv_dicts(src, f"evaluations/{SWITCHING_RUNS}"):
        freq = _freq_spec(r)
        if freq is not None:
            out.append({"instance": f"khadas-vim3/{r['graph']}", "mapping": r["order"], "mode": "serial",
                        "freq": freq, "measured_latency_ms": r.number("total_time"), "source_file": SWITCHING_RUNS})
    return out


def _csv_text(rows: list[dict], title: str) -> str:
    header = list(rows[0])
    lines = [f"# {title}; " + SOURCE.split(";")[0], ",".join(header)]
    lines += [",".join(f'"{r[h]}"' if "," in str(r[h]) else str(r[h]) for h in header) for r in rows]
    return "\n".join(lines) + "\n"


def _receiver_level(r: _Row) -> str:
    """The last level of a RecFreq cell such as ``[7]`` or ``[4, 7]``: the receiver's, or the
    GPU's host CPU's."""
    try:
        last = ast.literal_eval(r["RecFreq"])[-1]
    except (ValueError, TypeError, SyntaxError, IndexError, KeyError, MemoryError, RecursionError):
        raise r.error("RecFreq", f"expected a list of levels, got {r['RecFreq']!r}") from None
    # a whole number, as the level cells (int() had cut a level 7.5 to 7)
    return str(parse_number(last, r.source, r.field("RecFreq"), integer=True))


def _level_scaling(src: Path) -> dict[str, dict[str, list[float]]]:
    """transfer_freq.csv as "SRC->DST" -> copying CPU's level -> [time, power] against its top."""
    by_pair: dict[str, dict[str, tuple[float, float]]] = defaultdict(dict)
    for r in _csv_dicts(src, "transfer_freq.csv"):
        order = r["order"]
        level = _receiver_level(r)
        if len(order) < 2:
            raise r.error("order", f"expected two PUs, got {order!r}")
        by_pair[f"{order[0]}->{order[1]}"][level] = (r.measure("time_ratio", positive=True),
                                                        r.measure("power_ratio", positive=True))
    out = {}
    for pair, levels in sorted(by_pair.items()):
        top = levels[max(levels, key=int)]
        out[pair] = {lv: [round(t / top[0], 6), round(p / top[1], 6)]
                     for lv, (t, p) in sorted(levels.items(), key=lambda kv: int(kv[0]))}
    return out


def import_khadas(src: Path, repo: Path) -> list[Path]:
    """Read the raw measurements under ``src`` and write the derived files into ``repo``, all or
    nothing. Every file is derived into a stage folder laid out as ``repo`` (profiles/... and
    instances/...; the fit reads the derived run tables back from it), and only then do they all
    move in together (core.io.staged_folder): a bad measurement file found late, or a write that
    fails while they move in, leaves ``repo`` as it was. Files in ``repo`` that the import does
    not write are never touched."""
    with staged_folder(repo, marked=False) as stage:     # the repository the user names, updated by design
        derived = _derive(src, stage)
    return [repo / path.relative_to(stage) for path in derived]


def _derive(src: Path, repo: Path) -> list[Path]:
    """Derive every file from the measurements under ``src`` and write it under ``repo`` (the
    stage folder of :func:`import_khadas`); the paths written."""
    transfers_raw: dict[tuple, list[float]] = defaultdict(list)
    transfer_rows = _csv_dicts(src, "transfers.csv")
    if not transfer_rows:
        raise InputError(str(src / "transfers.csv"), "", "no measured transfers")
    for r in transfer_rows:
        transfers_raw[(r["Graph"], r.block(), r["Src"], r["Dest"])].append(r.measure("Time"))
    by_graph: dict[str, dict] = defaultdict(dict)
    pair_values: dict[str, list[float]] = defaultdict(list)
    for (g, layer, s, d), vals in transfers_raw.items():
        by_graph[g][(layer, s, d)] = statistics.median(vals)
        pair_values[f"{s}->{d}"].append(statistics.median(vals))
    pair_medians = {k: round(statistics.median(v), 6) for k, v in sorted(pair_values.items())}
    powers = [r.number("transfer_power") for r in _csv_dicts(src, "transfer_freq.csv")]
    if not powers:
        raise InputError(str(src / "transfer_freq.csv"), "transfer_power", "no rows")
    transfer_power = statistics.median(powers)

    written: list[Path] = []
    groups: list[tuple[str, list[dict], dict, str]] = []
    tables = {}
    for file, graphs in (("layers_dvfs.csv", DVFS_GRAPHS), ("inception_blocks.csv", tuple(PARAPIPE_GRAPHS))):
        rows = tables[file] = defaultdict(list)
        for r in _read_rows(src, file):
            rows[r["Graph"]].append(r)
        for g in graphs:
            if not rows[g]:
                raise InputError(str(src / file), "Graph", f"no rows of {g}")
    for g in DVFS_GRAPHS:
        groups.append((g, tables["layers_dvfs.csv"][g], by_graph.get(g, {}),
                       "CO-UP layers_dvfs.csv (every DVFS level)"))
    for g, name in PARAPIPE_GRAPHS.items():
        groups.append((name, tables["inception_blocks.csv"][g], by_graph.get(g, {}),
                       "Para-Pipe inception_blocks.csv (top DVFS level)"))
    docs = {name: _build_profile(name, rows, transfers, pair_medians, transfer_power, campaign)
            for name, rows, transfers, campaign in groups}
    scaling = _level_scaling(src)
    for doc in docs.values():
        doc["transfers"]["level_scaling"] = {k: v for k, v in scaling.items()
                                             if all(p in doc["pus"] for p in k.split("->"))}
    folder = repo / "instances" / "khadas-vim3"
    # the fit needs runs of both kinds; a folder without any had been an IndexError traceback
    evaluations, switching = _evaluations(src), _switching_runs(src)
    if not evaluations:
        raise InputError(str(src / "evaluations"), "", "no measured whole-network runs (evaluations/*.csv)")
    if not switching:
        raise InputError(str(src / "evaluations" / SWITCHING_RUNS), "", "no measured layer-switching runs")
    written.append(write_atomic(folder / "evaluations.csv",
                                _csv_text(evaluations, "Measured whole-network runs on the Khadas VIM3")))
    written.append(write_atomic(folder / "switching_runs.csv",
                                _csv_text(switching, "Measured layer-switching runs of YOLOv3 "
                                          "on the Khadas VIM3 (one-frame time)")))
    docs = fitted_documents(docs, read_runs(folder / "evaluations.csv") + read_runs(folder / "switching_runs.csv"))
    for name, doc in docs.items():
        written.append(write_json(repo / "profiles" / "data" / "khadas-vim3" / f"{name}.json", doc))
        written.append(write_json(folder / f"{name}.json", _instance(name, len(doc["units"]))))
    return written
