"""The profile file format: what each unit costs on each processing unit (PU).

A profile is JSON with ``"schema": "pipeplan.profile/1"``; the README documents it field by
field. In short::

    {
      "schema": "pipeplan.profile/1",
      "name": "khadas-vim3/Google",
      "source": "where the numbers come from (citation)",
      "power_model": "board",            # or "per_pu"
      "host_pu": "B",                    # CPU that runs the input stage (optional)
      "pus": {"B": {"kind": "cpu", "levels": ["0", ..., "7"], "idle_power_mw": 0.0}, ...},
      "units": ["b0", "b1", ...],
      "time_ms":  {"B": {"7": [t_b0, t_b1, ...], ...}, ...},   # null: unit cannot run there
      "power_mw": {"B": {"7": [p_b0, p_b1, ...], ...}, ...},
      "input_stage":  {"B": {"7": {"time_ms": 14.1, "power_mw": 4369.0}}, ...},   # optional
      "output_stage": {"B": {"7": {"time_ms": 0.19, "power_mw": 4369.0}}, ...},   # optional
      "transfers": {
        "measured": {"b3": {"G->B": 4.04, ...}, ...},       # output of a unit, PU to PU (ms)
        "pairs": {"G->B": {"fixed_ms": 1.2, "ms_per_mb": 3.0}, ...},   # affine in bytes
        "default": {"fixed_ms": 0.0, "ms_per_mb": 0.0},
        "power_mw": 4000.0
      }
    }

Levels are DVFS operating points listed slowest first: "min" is the first, "max" the last.
``input_stage``/``output_stage`` are keyed by the PU that runs the first/last unit, because
on the measured board the image pre-processing time depends on where block 0 runs.

Power models: ``board`` means each power figure is whole-board power while that phase runs
(the Khadas INA260 measurements), so energy is the sum over phases of power x time; ``per_pu``
means active power of that PU alone, and each PU's idle power is added over the idle part of
the period (roofline platforms).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeplan.core.errors import InputError, brief_value
from pipeplan.core.io import check_fields, check_name, finite_number, has_control_characters, key_as_field, load_json
from pipeplan.formulations.mapping.graph_limits import check_graph_size

SCHEMA = "pipeplan.profile/1"
PROFILE_FIELDS = ("schema", "name", "source", "notes", "power_model", "host_pu", "pus", "units", "time_ms",
                  "power_mw", "input_stage", "output_stage", "transfers", "static_power_mw",
                  "concurrent_power_share", "reentry", "whole_graph")
POWER_MODELS = ("board", "per_pu")


@dataclass(frozen=True)
class PU:
    name: str
    kind: str
    levels: tuple[str, ...]
    idle_power_mw: float = 0.0
    description: str = ""

    @property
    def max_level(self) -> str:
        return self.levels[-1]

    @property
    def min_level(self) -> str:
        return self.levels[0]


@dataclass(frozen=True)
class Phase:
    """A fixed phase (input or output stage): its time and power."""

    time_ms: float
    power_mw: float


@dataclass(frozen=True)
class AffineTransfer:
    fixed_ms: float = 0.0
    ms_per_mb: float = 0.0

    def time_ms(self, nbytes: float | None) -> float:
        return self.fixed_ms + self.ms_per_mb * (nbytes or 0.0) / 1e6


@dataclass(frozen=True)
class SwitchCost:
    """What a switch between two PUs costs on top of the copy that ``transfers`` measures: a
    fixed part (kernel or NPU-graph launch, buffer map/unmap, the driver's work on the host CPU)
    and a part that grows with the tensor's size (layout and format conversion, e.g. quantising
    for the NPU): ``per_size x size_ms ** exponent``. The size is ``size_ms``: the time the
    board takes to read that tensor back from the GPU, a measured stand-in for its bytes.
    Fitted by pipeplan.profiles.khadas_costmodel; zero where not fitted."""

    fixed_ms: float = 0.0
    per_size: float = 0.0
    exponent: float = 1.0

    def time_ms(self, size_ms: float) -> float:
        return self.fixed_ms + self.per_size * size_ms ** self.exponent


@dataclass(frozen=True)
class Transfers:
    measured: dict[str, dict[str, float]] = field(default_factory=dict)
    pairs: dict[str, AffineTransfer] = field(default_factory=dict)
    default: AffineTransfer = AffineTransfer()
    power_mw: float = 0.0
    switch: dict[str, SwitchCost] = field(default_factory=dict)     # "SRC->DST" -> switch cost
    size_ms: dict[str, float] = field(default_factory=dict)         # unit -> size of its output
    # "SRC->DST" -> level of the CPU that copies -> (time factor, power factor) against the top
    # level. The copying CPU is the receiver, or for a two-part level ("gpu.host") its host.
    level_scaling: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)

    def time_ms(self, unit: str, src_pu: str, dst_pu: str, nbytes: float | None,
                dst_level: str | None = None) -> float:
        """Time to hand the output of ``unit`` from ``src_pu`` to ``dst_pu`` (0 on one PU): the
        copy (measured at the top frequencies, or affine in bytes) plus the pair's switch cost,
        both CPU work, so both scaled by the copying CPU's DVFS level (``dst_level``, the
        receiving unit's level; None = top)."""
        if src_pu == dst_pu:
            return 0.0
        work = self.copy_ms(unit, src_pu, dst_pu, nbytes) + self.switch_ms(unit, src_pu, dst_pu)
        return work * self.scaling(src_pu, dst_pu, dst_level)[0]

    def scaling(self, src_pu: str, dst_pu: str, dst_level: str | None) -> tuple[float, float]:
        """(time, power) factors of a copy received at ``dst_level`` (1, 1 at the top level or
        where not measured)."""
        if dst_level is None or not self.level_scaling:
            return 1.0, 1.0
        return self.level_scaling.get(f"{src_pu}->{dst_pu}", {}).get(dst_level.split(".")[-1], (1.0, 1.0))

    def copy_ms(self, unit: str, src_pu: str, dst_pu: str, nbytes: float | None) -> float:
        key = f"{src_pu}->{dst_pu}"
        measured = self.measured.get(unit, {}).get(key)
        if measured is not None:
            return measured
        return self.pairs.get(key, self.default).time_ms(nbytes)

    def switch_ms(self, unit: str, src_pu: str, dst_pu: str) -> float:
        cost = self.switch.get(f"{src_pu}->{dst_pu}") if src_pu != dst_pu else None
        return cost.time_ms(self.size_ms.get(unit, 0.0)) if cost else 0.0


@dataclass(frozen=True)
class Profile:
    name: str
    source: str
    power_model: str
    pus: dict[str, PU]
    units: tuple[str, ...]
    time_ms: dict[str, dict[str, tuple[float | None, ...]]]
    power_mw: dict[str, dict[str, tuple[float | None, ...]]]
    input_stage: dict[str, dict[str, Phase]] = field(default_factory=dict)
    output_stage: dict[str, dict[str, Phase]] = field(default_factory=dict)
    transfers: Transfers = Transfers()
    host_pu: str | None = None
    notes: str = ""
    # Board power with the SoC powered but no stage running (mW), for steady-state energy
    # (evaluator.py); None: unknown, steady-state energy then equals per-frame energy.
    static_power_mw: float | None = None
    # Share of a further concurrent stage's dynamic power that shows on the board (evaluator.py).
    concurrent_power_share: float = 1.0
    # PU -> extra time, as a multiple of its own time, of the first unit of each segment (run
    # of consecutive units in the instance's unit order) on that PU, paid when the frame holds
    # two or more segments there: the NPU keeps one compiled graph warm (evaluator.py).
    reentry: dict[str, float] = field(default_factory=dict)
    # PU -> time of the whole network run as one compiled graph on that PU, as a share of its
    # blocks' summed times (the NPU compiles one graph when every block runs on it).
    whole_graph: dict[str, float] = field(default_factory=dict)

    @property
    def unit_index(self) -> dict[str, int]:
        return {u: i for i, u in enumerate(self.units)}

    def level(self, pu: str, spec: str) -> str:
        """Resolve ``max``, ``min`` or a level name of ``pu``. For two-part levels such as the
        GPU's ``gpu.host``, the first part alone means that level with the host at its top."""
        levels = self.pus[pu].levels
        if spec == "max":
            return levels[-1]
        if spec == "min":
            return levels[0]
        if spec in levels:
            return spec
        partial = [lv for lv in levels if lv.split(".")[0] == spec]
        if partial:
            return partial[-1]
        raise KeyError(f"PU {pu} has no DVFS level {spec!r} (levels: {', '.join(levels)})")

    def time(self, unit_idx: int, pu: str, level: str) -> float | None:
        return self.time_ms[pu][level][unit_idx]

    def power(self, unit_idx: int, pu: str, level: str) -> float:
        value = self.power_mw.get(pu, {}).get(level)
        if value is None or value[unit_idx] is None:
            return 0.0
        return value[unit_idx]

    @property
    def has_power(self) -> bool:
        """Whether the profile holds any power figure. One without (a host measured by
        ``pipeplan profile`` times nodes only) scores every plan 0 mJ, which is no energy figure:
        outputs say ``n/a``."""
        phases = (ph for table in (self.input_stage, self.output_stage) for by in table.values() for ph in by.values())
        return (any(v for by in self.power_mw.values() for values in by.values() for v in values)
                or any(pu.idle_power_mw for pu in self.pus.values())
                or any(ph.power_mw for ph in phases) or bool(self.transfers.power_mw))

    def can_run(self, unit_idx: int, pu: str) -> bool:
        return self.time_ms[pu][self.pus[pu].max_level][unit_idx] is not None

    def to_dict(self) -> dict[str, Any]:
        def phases(table: dict[str, dict[str, Phase]]) -> dict:
            return {p: {lv: {"time_ms": ph.time_ms, "power_mw": ph.power_mw}
                        for lv, ph in by.items()} for p, by in table.items()}

        out: dict[str, Any] = {
            "schema": SCHEMA,
            "name": self.name,
            "source": self.source,
            "power_model": self.power_model,
        }
        if self.host_pu:
            out["host_pu"] = self.host_pu
        if self.static_power_mw is not None:
            out["static_power_mw"] = self.static_power_mw
            out["concurrent_power_share"] = self.concurrent_power_share
        if self.reentry:
            out["reentry"] = self.reentry
        if self.whole_graph:
            out["whole_graph"] = self.whole_graph
        if self.notes:
            out["notes"] = self.notes
        out["pus"] = {p.name: {"kind": p.kind, "levels": list(p.levels),
                               "idle_power_mw": p.idle_power_mw,
                               **({"description": p.description} if p.description else {})}
                      for p in self.pus.values()}
        out["units"] = list(self.units)
        out["time_ms"] = {p: {lv: list(v) for lv, v in by.items()} for p, by in self.time_ms.items()}
        out["power_mw"] = {p: {lv: list(v) for lv, v in by.items()} for p, by in self.power_mw.items()}
        if self.input_stage:
            out["input_stage"] = phases(self.input_stage)
        if self.output_stage:
            out["output_stage"] = phases(self.output_stage)
        t = self.transfers
        out["transfers"] = {
            "measured": t.measured,
            "pairs": {k: {"fixed_ms": a.fixed_ms, "ms_per_mb": a.ms_per_mb} for k, a in t.pairs.items()},
            "default": {"fixed_ms": t.default.fixed_ms, "ms_per_mb": t.default.ms_per_mb},
            "power_mw": t.power_mw,
        }
        if t.switch:
            out["transfers"]["switch"] = {p: {"fixed_ms": c.fixed_ms, "per_size": c.per_size,
                                              "exponent": c.exponent} for p, c in t.switch.items()}
            out["transfers"]["size_ms"] = t.size_ms
        if t.level_scaling:
            out["transfers"]["level_scaling"] = {k: {lv: list(f) for lv, f in by.items()}
                                                 for k, by in t.level_scaling.items()}
        return out


# ---------------------------------------------------------------------------------- loading


MAX_TIME_MS = 1e7      # a unit's, a phase's or a transfer's fixed time: about 2.8 hours
MAX_POWER_MW = 1e9     # 1 MW
MAX_FACTOR = 1e3       # a multiple of a time or power (level scaling, reentry, whole graph)
MAX_EXPONENT = 10.0    # of a switch cost's size term
# Past them the sums overflowed: 1e15 ms overflowed the exact models' 64-bit time units
# (NumPy's cast warning, then a "time_limit" that had not run), 1e308 mW made energies
# infinite, 1e308 ms an OverflowError in heft.


def check_magnitudes(profile: Profile, where: str, prefix: str = "") -> None:
    """Every time and power of ``profile`` at most MAX_TIME_MS / MAX_POWER_MW: a profile file's
    (checked as it loads) and a platform's roofline profile (checked by MappingProblem: a peak
    of 1e-300 GFLOPS made times of 1e300 ms). ``prefix``: the fields' path in ``where``."""
    def check(value, limit: float, fld: str, unit: str) -> None:
        if value is not None and value > limit:
            raise InputError(where, f"{prefix}{fld}", f"{value:g} {unit} is more than {limit:g} {unit}")

    for table, limit, unit in (("time_ms", MAX_TIME_MS, "ms"), ("power_mw", MAX_POWER_MW, "mW")):
        for pu, by_level in getattr(profile, table).items():
            for lv, values in by_level.items():
                for k, v in enumerate(values):
                    check(v, limit, f"{table}.{pu}.{lv}[{k}]", unit)
    for name, pu in profile.pus.items():
        check(pu.idle_power_mw, MAX_POWER_MW, f"pus.{name}.idle_power_mw", "mW")
    check(profile.static_power_mw, MAX_POWER_MW, "static_power_mw", "mW")
    for stage in ("input_stage", "output_stage"):
        for pu, by_level in getattr(profile, stage).items():
            for lv, ph in by_level.items():
                check(ph.time_ms, MAX_TIME_MS, f"{stage}.{pu}.{lv}.time_ms", "ms")
                check(ph.power_mw, MAX_POWER_MW, f"{stage}.{pu}.{lv}.power_mw", "mW")
    t = profile.transfers
    check(t.power_mw, MAX_POWER_MW, "transfers.power_mw", "mW")
    for key, affine in [("default", t.default)] + [(f"pairs.{k}", a) for k, a in t.pairs.items()]:
        check(affine.fixed_ms, MAX_TIME_MS, f"transfers.{key}.fixed_ms", "ms")
        check(affine.ms_per_mb, MAX_TIME_MS, f"transfers.{key}.ms_per_mb", "ms")
    for unit, by_pair in t.measured.items():
        for pair, v in by_pair.items():
            check(v, MAX_TIME_MS, f"transfers.measured.{unit}.{pair}", "ms")
    for unit, v in t.size_ms.items():
        check(v, MAX_TIME_MS, f"transfers.size_ms.{unit}", "ms")
    largest = max(t.size_ms.values(), default=0.0)
    for pair, cost in t.switch.items():
        check(cost.exponent, MAX_EXPONENT, f"transfers.switch.{pair}.exponent", "")
        check(cost.time_ms(largest), MAX_TIME_MS, f"transfers.switch.{pair}", "ms (the largest unit's switch)")
    for pair, by_level in t.level_scaling.items():
        for lv, factors in by_level.items():
            check(max(factors), MAX_FACTOR, f"transfers.level_scaling.{pair}.{lv}", "x")
    for key in ("reentry", "whole_graph"):
        for pu, v in getattr(profile, key).items():
            check(v, MAX_FACTOR, f"{key}.{pu}", "x")


def check_transfer_bytes(profile: Profile, nbytes: float, where: str, fld: str) -> None:
    """A tensor of ``nbytes`` takes at most MAX_TIME_MS on every link of ``profile`` (1e300
    bytes at 1 ms/MB had made CP-SAT fail on an infinite coefficient)."""
    t = profile.transfers
    slowest = max([t.default, *t.pairs.values()], key=lambda a: a.ms_per_mb)
    if slowest.time_ms(nbytes) > MAX_TIME_MS:
        raise InputError(where, fld, f"{nbytes:g} bytes take {slowest.time_ms(nbytes):g} ms on the profile's "
                         f"slowest link, more than {MAX_TIME_MS:g} ms")


class Reader:
    """Validates a parsed JSON document, naming the file and field of the first problem."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, fld: str, msg: str) -> InputError:
        return InputError(self.source, fld, msg)

    def obj(self, value: Any, fld: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(fld, f"expected an object, got {type(value).__name__}")
        return value

    def get(self, d: dict, key: str, fld: str) -> Any:
        if key not in d:
            raise self.fail(f"{fld}.{key}" if fld else key, "missing field")
        return d[key]

    def number(self, value: Any, fld: str, *, allow_none: bool = False) -> float | None:
        if value is None and allow_none:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(fld, f"expected a number, got {brief_value(value)}")
        if not finite_number(value):   # NaN, infinite, or an integer beyond float range
            raise self.fail(fld, f"not a finite number: {brief_value(value)}")
        if value < 0:
            raise self.fail(fld, f"negative value {brief_value(value)}")
        return float(value)

    def string(self, value: Any, fld: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(fld, f"expected a non-empty string, got {value!r}")
        return value

    def name(self, value: Any, fld: str, *, capped: bool = True) -> str:
        """A non-empty name without control characters, of at most 255 bytes unless not
        ``capped`` (``core.io.check_name``), as other names are (a PU's ``kind``, a runtime's
        ``provider``: printed in messages and written into exports; unit names are not capped)."""
        return check_name(value, self.source, fld, capped=capped)


MAX_PU_NAME = 64


def pu_name_fault(name: Any) -> str | None:
    """Why ``name`` is no PU name, or None. PU names are printed in summaries, errors and plans
    and written into exports and transfer keys (``SRC->DST``): a line break or an escape
    sequence in one had been printed raw (an ESC[2J cleared the terminal), and ``->`` made
    transfer keys ambiguous."""
    if not isinstance(name, str) or not name or len(name) > MAX_PU_NAME:
        return f"a PU name is 1 to {MAX_PU_NAME} characters, got {brief_value(name)}"
    if has_control_characters(name) or "->" in name or name != name.strip():
        return f"a PU name holds no control characters, no '->' and no outer spaces, got {brief_value(name)}"
    return None


def profile_from_dict(doc: Any, source: str = "<profile>") -> Profile:
    r = Reader(source)
    doc = r.obj(doc, "")
    schema = r.get(doc, "schema", "")
    if schema != SCHEMA:
        raise r.fail("schema", f"unsupported schema {schema!r} (expected {SCHEMA!r})")
    check_fields(doc, PROFILE_FIELDS, r.source)
    power_model = doc.get("power_model", "board")
    if power_model not in POWER_MODELS:
        raise r.fail("power_model", f"must be one of {', '.join(POWER_MODELS)}, got {power_model!r}")

    pus: dict[str, PU] = {}
    for name, spec in r.obj(r.get(doc, "pus", ""), "pus").items():
        fault = pu_name_fault(name)
        if fault:
            raise r.fail(f"pus.{key_as_field(name)}", fault)
        spec = r.obj(spec, f"pus.{name}")
        levels = r.get(spec, "levels", f"pus.{name}")
        if not isinstance(levels, list) or not levels or not all(isinstance(x, str) for x in levels):
            raise r.fail(f"pus.{name}.levels", "expected a non-empty list of level names")
        for lv in levels:           # a level is printed in plans, tables and error lines
            r.name(lv, f"pus.{name}.levels")
        seen: set[str] = set()
        twice = next((lv for lv in levels if lv in seen or seen.add(lv)), None)
        if twice is not None:      # had been accepted: which of the two a plan's level meant was arbitrary
            raise r.fail(f"pus.{name}.levels", f"level {brief_value(twice)} listed twice")
        pus[name] = PU(name=name, kind=r.name(spec.get("kind", "cpu"), f"pus.{name}.kind"),
                       levels=tuple(levels),
                       idle_power_mw=r.number(spec.get("idle_power_mw", 0.0), f"pus.{name}.idle_power_mw"),
                       description=str(spec.get("description", "")))
    if not pus:
        raise r.fail("pus", "no processing units")

    units = r.get(doc, "units", "")
    if not isinstance(units, list) or not units or not all(isinstance(u, str) for u in units):
        raise r.fail("units", "expected a non-empty list of unit names")
    check_graph_size(len(units), 0, r.source, "")     # before its tables are read
    if len(set(units)) != len(units):
        raise r.fail("units", "duplicate unit names")
    for i, u in enumerate(units):
        r.name(u, f"units[{i}]", capped=False)

    def table(key: str, required_all: bool) -> dict[str, dict[str, tuple]]:
        raw = r.obj(r.get(doc, key, "") if required_all else doc.get(key, {}), key)
        out: dict[str, dict[str, tuple]] = {}
        for pu in pus.values():
            if pu.name not in raw:
                if required_all:
                    raise r.fail(f"{key}.{pu.name}", "missing PU")
                continue
            by_level = r.obj(raw[pu.name], f"{key}.{pu.name}")
            out[pu.name] = {}
            for lv, values in by_level.items():
                fld = f"{key}.{pu.name}.{lv}"
                if lv not in pu.levels:
                    raise r.fail(fld, f"unknown DVFS level (levels: {', '.join(pu.levels)})")
                if not isinstance(values, list) or len(values) != len(units):
                    raise r.fail(fld, f"expected a list of {len(units)} values, one per unit")
                out[pu.name][lv] = tuple(r.number(v, f"{fld}[{i}]", allow_none=True)
                                         for i, v in enumerate(values))
            if required_all and pu.max_level not in out[pu.name]:
                raise r.fail(f"{key}.{pu.name}.{pu.max_level}", "missing the top DVFS level")
        for extra in raw:
            if extra not in pus:
                raise r.fail(f"{key}.{extra}", "PU not declared in pus")
        return out

    time_ms = table("time_ms", required_all=True)
    power_mw = table("power_mw", required_all=False)
    for i, u in enumerate(units):
        if all(time_ms[p][pus[p].max_level][i] is None for p in pus):
            raise r.fail(f"time_ms.*.{u}", "unit has no time on any PU")

    def phase_table(key: str) -> dict[str, dict[str, Phase]]:
        raw = r.obj(doc.get(key, {}), key)
        out: dict[str, dict[str, Phase]] = {}
        for pu, by_level in raw.items():
            if pu not in pus:
                raise r.fail(f"{key}.{pu}", "PU not declared in pus")
            out[pu] = {}
            for lv, ph in r.obj(by_level, f"{key}.{pu}").items():
                fld = f"{key}.{pu}.{lv}"
                if lv not in pus[pu].levels:
                    raise r.fail(fld, "unknown DVFS level")
                ph = r.obj(ph, fld)
                out[pu][lv] = Phase(time_ms=r.number(r.get(ph, "time_ms", fld), f"{fld}.time_ms"),
                                    power_mw=r.number(ph.get("power_mw", 0.0), f"{fld}.power_mw"))
        return out

    tr = r.obj(doc.get("transfers", {}), "transfers")

    def affine(spec: Any, fld: str) -> AffineTransfer:
        spec = r.obj(spec, fld)
        return AffineTransfer(fixed_ms=r.number(spec.get("fixed_ms", 0.0), f"{fld}.fixed_ms"),
                              ms_per_mb=r.number(spec.get("ms_per_mb", 0.0), f"{fld}.ms_per_mb"))

    def pair_key(key: str, fld: str) -> str:
        a, sep, b = key.partition("->")
        if not sep or a not in pus or b not in pus:
            raise r.fail(fld, "expected 'SRC->DST' with declared PUs")
        return key

    measured: dict[str, dict[str, float]] = {}
    for unit, pairs in r.obj(tr.get("measured", {}), "transfers.measured").items():
        if unit not in units:
            raise r.fail(f"transfers.measured.{unit}", "unknown unit")
        measured[unit] = {pair_key(k, f"transfers.measured.{unit}.{k}"):
                          r.number(v, f"transfers.measured.{unit}.{k}")
                          for k, v in r.obj(pairs, f"transfers.measured.{unit}").items()}
    transfers = Transfers(
        measured=measured,
        pairs={pair_key(k, f"transfers.pairs.{k}"): affine(v, f"transfers.pairs.{k}")
               for k, v in r.obj(tr.get("pairs", {}), "transfers.pairs").items()},
        default=affine(tr.get("default", {}), "transfers.default"),
        power_mw=r.number(tr.get("power_mw", 0.0), "transfers.power_mw"),
        switch=switch_costs(r, tr, pus),
        size_ms={u: r.number(v, f"transfers.size_ms.{u}")
                 for u, v in r.obj(tr.get("size_ms", {}), "transfers.size_ms").items()},
        level_scaling=level_scaling(r, tr, pair_key),
    )
    for u in transfers.size_ms:
        if u not in units:
            raise r.fail(f"transfers.size_ms.{u}", "unknown unit")
    host = doc.get("host_pu")
    if host is not None and host not in pus:
        raise r.fail("host_pu", f"unknown PU {host!r}")
    static = doc.get("static_power_mw")
    profile = Profile(name=str(doc.get("name", Path(source).stem)), source=str(doc.get("source", "")),
                   power_model=power_model, pus=pus, units=tuple(units), time_ms=time_ms,
                   power_mw=power_mw, input_stage=phase_table("input_stage"),
                   output_stage=phase_table("output_stage"), transfers=transfers, host_pu=host,
                   notes=str(doc.get("notes", "")),
                   static_power_mw=None if static is None else r.number(static, "static_power_mw"),
                   concurrent_power_share=share(r, doc.get("concurrent_power_share", 1.0)),
                   reentry=per_pu_numbers(r, doc, "reentry", pus),
                   whole_graph=per_pu_numbers(r, doc, "whole_graph", pus))
    check_magnitudes(profile, source)
    check_power_coverage(profile, r)
    return profile


def check_power_coverage(profile: Profile, r: Reader) -> None:
    """A profile that gives unit powers gives one for every measured time. A missing one had
    counted as 0 mW: on a board-power profile that is below the board's static power, so a
    solver minimising energy favoured the units whose power nobody measured. (A profile with
    no unit power at all, such as a host profile of times, scores no energy: ``has_power``.)"""
    if not any(v is not None for by in profile.power_mw.values() for values in by.values() for v in values):
        return
    for pu, by_level in profile.time_ms.items():
        for lv, times in by_level.items():
            powers = profile.power_mw.get(pu, {}).get(lv)
            for i, t in enumerate(times):
                if t is not None and (powers is None or powers[i] is None):
                    fld = f"power_mw.{pu}.{lv}" + ("" if powers is None else f"[{i}]")
                    raise r.fail(fld, f"no power for unit {profile.units[i]}, whose time is given: "
                                      "it would count as 0 mW (give a measured or estimated figure)")


def per_pu_numbers(r: Reader, doc: dict, key: str, pus: dict[str, PU]) -> dict[str, float]:
    out = {}
    for pu, value in r.obj(doc.get(key, {}), key).items():
        if pu not in pus:
            raise r.fail(f"{key}.{pu}", "PU not declared in pus")
        out[pu] = r.number(value, f"{key}.{pu}")
    if key == "whole_graph" and any(v == 0 for v in out.values()):
        raise r.fail(key, "a share of 0 would make the whole network free")
    return out


def level_scaling(r: Reader, tr: dict, pair_key) -> dict[str, dict[str, tuple[float, float]]]:
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for key, by_level in r.obj(tr.get("level_scaling", {}), "transfers.level_scaling").items():
        fld = f"transfers.level_scaling.{key}"
        pair_key(key, fld)
        out[key] = {}
        for lv, factors in r.obj(by_level, fld).items():
            if not isinstance(factors, list) or len(factors) != 2:
                raise r.fail(f"{fld}.{lv}", "expected [time factor, power factor]")
            tf, pf = (r.number(f, f"{fld}.{lv}") for f in factors)
            if tf == 0:
                raise r.fail(f"{fld}.{lv}", "a time factor of 0 would make the copy free")
            out[key][lv] = (tf, pf)
    return out


def share(r: Reader, value: Any) -> float:
    value = r.number(value, "concurrent_power_share")
    if value > 1:
        raise r.fail("concurrent_power_share", f"{value} is above 1 (a share of a stage's dynamic power)")
    return value


def switch_costs(r: Reader, tr: dict, pus: dict[str, PU]) -> dict[str, SwitchCost]:
    out = {}
    for key, spec in r.obj(tr.get("switch", {}), "transfers.switch").items():
        fld = f"transfers.switch.{key}"
        a, sep, b = key.partition("->")
        if not sep or a not in pus or b not in pus or a == b:
            raise r.fail(fld, "expected 'SRC->DST' with two declared PUs")
        spec = r.obj(spec, fld)
        out[key] = SwitchCost(fixed_ms=r.number(spec.get("fixed_ms", 0.0), f"{fld}.fixed_ms"),
                             per_size=r.number(spec.get("per_size", 0.0), f"{fld}.per_size"),
                             exponent=r.number(spec.get("exponent", 1.0), f"{fld}.exponent"))
        if out[key].exponent > 4:
            raise r.fail(f"{fld}.exponent", f"{out[key].exponent} is beyond 4 (no physical size law)")
    return out


def load_profile(path: str | Path) -> Profile:
    return profile_from_dict(load_json(path), str(path))
