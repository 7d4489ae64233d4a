"""Rollout-admission problem data: one round of R prompts (groups) x K samples, the rollout
engine and the trainer. Plain frozen data; the simulator (``simulator.py``) gives it meaning.

Requests are numbered group-major: request ``i`` is sample ``i % K`` of group ``i // K``. A
request's KV footprint is its prompt plus its response tokens; the engine reserves the whole
footprint when it admits the request (see ``EngineModel``).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from functools import cached_property
from typing import Any

from pipeplan.core.errors import InputError, brief_value
from pipeplan.core.io import check_fields, check_name
from pipeplan.core.sizes import check_memory

PROBLEM_SCHEMA = "pipeplan.rollout/1"
PROBLEM_FIELDS = ("schema", "name", "source", "engine", "trainer", "prompt_tokens", "response_tokens", "arrival",
                  "max_response_tokens", "rounds", "meta")     # what ``RolloutProblem.to_dict`` writes
KV_MODES = ("reserve", "on_demand")
RETRACT_RULES = ("sglang", "vllm")
RESUME_MODES = ("recompute", "swap")
ROUTERS = ("round_robin", "least_load", "group_affinity")
# replicas beyond max(requests, FEW_REPLICAS) are refused: no request ever reaches them, and the
# simulator holds each one's state and starts with a decision of each (a billion of them would
# never finish); below that a decision costs O(log replicas) (simulator.py)
FEW_REPLICAS = 16


# the most seconds a time term of the engine or the trainer may take (a step, a token, an update):
# with MAX_COUNT below a decode step then takes at most about 2e15 s (c0 + c1 x 1e9 sequences +
# c2 x 1e9 KV tokens) and a prefill as much, so a round's times stay finite, far below float
# overflow, for any round that can be simulated (at 1e300 s they overflowed). They do not resolve
# seconds there: a float sum keeps about 1e-16 of its value (1e6-token responses at 1e6 s per
# token end near 5e17 s, where one ulp is 64 s), so the checker compares times within a tolerance
# relative to their magnitude (``checker.REL_TOL``), not a fixed number of seconds
MAX_SECONDS = 1e6
# the least seconds a decode step's fixed cost ``c0_s`` may take: the offline planners divide by
# it (CP-SAT's time unit is c0_s / 1000 on a linear engine, step-plan counts the steps that fit a
# time): at c0_s = 5e-324 (a denormal) the unit had been 0 (a ZeroDivisionError) and at 1e-300
# beside a 1e6 s trainer the quotients infinite (an OverflowError), both ending `rollout optimum`
# with exit 1. A picosecond is far below any engine (the paper's take about 10 ms)
MIN_C0_S = 1e-12
# the most tokens (or sequences, steps) an integer field may hold: the offline CP-SAT model sums
# them over every request in 64-bit integers (kv_capacity_tokens=1e23 failed there as "Unable to
# cast"), and step-plan's timeline holds arrays over every decode step
MAX_COUNT = 10**9
# Peak memory per request of a round, simulated (measured: about 760 bytes at R = 4,000, K = 100):
# a drawn round (``--R x --K``), a problem file and a trace are all refused past the memory cap
BYTES_PER_REQUEST = 1024


def _positive(source: str, where: str, value, *, integer: bool = False, zero_ok: bool = False,
              seconds: bool = False, most: int | None = MAX_COUNT) -> None:
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type or (isinstance(value, float) and not math.isfinite(value)):
        raise InputError(source, where, f"expected a {'whole' if integer else 'finite'} number, got {value!r}")
    if value < 0 or (value == 0 and not zero_ok):
        raise InputError(source, where, f"must be {'non-negative' if zero_ok else 'positive'}, got {value!r}")
    if seconds and value > MAX_SECONDS:
        raise InputError(source, where, f"must be at most {MAX_SECONDS:g} s, got {value!r}")
    if integer and most is not None and value > most:
        raise InputError(source, where, f"must be at most {most:,}, got {value!r}")


@dataclass(frozen=True)
class EngineModel:
    """A continuous-batching engine (SGLang/vLLM style).

    Each decode step produces one token for every running request and takes
    ``c0_s + c1_s * batch + c2_s * active_kv_tokens`` seconds (fixed cost: weights read, launch
    and scheduler overhead; per-sequence cost: the dense layers; per-KV-token cost: attention
    reads the cache). Admitting requests runs a prefill pass first that stalls decoding for
    ``prefill_s + prefill_s_per_token * tokens`` per admitted request. At most ``max_num_seqs``
    requests run at once. The KV cache (``kv_capacity_tokens``) is managed in one of two ways:

    * ``reserve``: a request is admitted only if its whole footprint (prompt + response) fits
      next to the footprints of the running requests, so nothing is ever preempted (as if the
      engine knew each final length; every policy sees the same engine). The offline model is
      exact for this mode when the engine is also ``linear``.
    * ``on_demand`` (SGLang's scheduler, defaults from sgl-project/sglang
      python/sglang/srt/environ.py): KV grows a token per step. A request is admitted if the KV in
      use, plus ``ratio * min(max_new - generated, reserve_clip_tokens)`` for every running request
      and itself, plus its prompt, fits. The ratio starts at ``reserve_ratio_init`` (0.7) and
      decays linearly to ``reserve_ratio_min`` (0.7 x 0.14) over ``reserve_ratio_decay_steps``
      (600) decode steps. When the next step would not fit, the requests with the fewest
      generated tokens are retracted until ``retract_headroom_steps`` (20) steps fit; the ratio
      is then reset to (tokens generated by the remaining requests + 20 per request) / (their
      max_new) and decays again. A retracted request keeps its tokens, rejoins the tail of the
      engine's queue, and re-prefills prompt + generated tokens when admitted again.

    Real-engine features, each off by default (then the engine is exactly the one above):

    * ``retract_rule``: whom the engine retracts under KV pressure. ``sglang`` (above: fewest
      generated tokens first, back to the queue's tail, until ``retract_headroom_steps`` fit;
      sglang ``ScheduleBatch.retract_decode``) or ``vllm`` (the most recently admitted running
      request first, back to the *head* of the queue, until the next step fits; vLLM v1
      ``Scheduler.schedule``: ``self.running.pop()`` then ``self.waiting.prepend_request``).
    * ``policy_victims``: the admission policy orders the victims instead (FGD retracts
      non-frontier groups first); the engine's rule breaks ties.
    * ``resume``: how a retracted request resumes. ``recompute`` re-prefills prompt + generated
      tokens (SGLang; vLLM v1's only mode); ``swap`` moves its KV to host memory and back at
      ``swap_s_per_token`` each way, stalling the engine (vLLM v0's ``preemption_mode="swap"``).
    * ``priority_preemption``: SGLang's priority scheduling (``--enable-priority-scheduling``
      with ``--priority-scheduling-preemption-threshold``): a waiting request whose policy
      priority beats a running request's may preempt it when it does not fit otherwise. The
      running batch is bounded by ``max_num_seqs`` (SGLang's ``--max-running-requests``).
    * ``replicas``: data-parallel copies of this engine (each with its own ``max_num_seqs`` and
      KV), behind a router that places every request on arrival (SGLang's sgl-router):
      ``round_robin``, ``least_load`` (fewest outstanding requests) or ``group_affinity`` (a
      group's samples follow its first; the router's cache-aware policy routes shared
      prefixes together). Without affinity a group's samples are spread over replicas.
    * ``prefix_sharing``: SGLang's radix cache: the samples of one group share their prompt's
      KV and prefill on a replica; a sample admitted while another of its group runs there
      prefills only its own tokens. The prompt is dropped when the group's last running sample
      there leaves (the real cache may keep it longer: this is the conservative side).
    """

    max_num_seqs: int
    kv_capacity_tokens: int
    c0_s: float
    c1_s: float = 0.0
    c2_s: float = 0.0
    prefill_s: float = 0.0
    prefill_s_per_token: float = 0.0
    kv_mode: str = "reserve"
    reserve_ratio_init: float = 0.7
    reserve_ratio_min: float = 0.098
    reserve_ratio_decay_steps: int = 600
    reserve_clip_tokens: int = 4096
    retract_headroom_steps: int = 20
    retract_rule: str = "sglang"
    policy_victims: bool = False
    resume: str = "recompute"
    swap_s_per_token: float = 0.0
    priority_preemption: bool = False
    replicas: int = 1
    router: str = "round_robin"
    prefix_sharing: bool = False

    def step_time(self, batch: int, kv_tokens: float) -> float:
        return self.c0_s + self.c1_s * batch + self.c2_s * kv_tokens

    def prefill_time(self, prompt_tokens: int) -> float:
        return self.prefill_s + self.prefill_s_per_token * prompt_tokens

    def request_work(self, prompt_tokens, k):
        """The engine time a request adds, whatever runs beside it, while making its first k
        tokens: its prefill (once it has a token) and its share ``c1 + c2 x (prompt + tokens
        before)`` of each step it runs in. Elementwise on numpy arrays (the bounds and the
        just-in-time planner charge it per request)."""
        return (self.c1_s * k + self.c2_s * (k * prompt_tokens + k * (k - 1) / 2)
                + (k >= 1) * self.prefill_time(prompt_tokens))

    @property
    def linear(self) -> bool:
        """True when every request takes exactly ``len * c0_s`` whatever else runs: then the
        fixed-duration model of the offline optimum is exact."""
        return (self.kv_mode == "reserve" and self.c1_s == 0 and self.c2_s == 0 and self.prefill_s == 0
                and self.prefill_s_per_token == 0 and self.single)

    @property
    def single(self) -> bool:
        """One engine whose every request holds its own prompt: what the offline model and the
        analytic bounds assume."""
        return self.replicas == 1 and not self.prefix_sharing

    def features(self) -> list[str]:
        """The real-engine features switched on, for reports."""
        on = [f"retract={self.retract_rule}"] if self.retract_rule != "sglang" else []
        on += ["policy victims"] * self.policy_victims + ["priority preemption"] * self.priority_preemption
        on += [f"resume=swap ({self.swap_s_per_token * 1e6:g} us/token)"] if self.resume == "swap" else []
        on += [f"{self.replicas} replicas ({self.router})"] if self.replicas > 1 else []
        return on + ["prefix sharing"] * self.prefix_sharing

    def validate(self, source: str) -> None:
        _positive(source, "engine.max_num_seqs", self.max_num_seqs, integer=True)
        _positive(source, "engine.kv_capacity_tokens", self.kv_capacity_tokens, integer=True)
        _positive(source, "engine.c0_s", self.c0_s, seconds=True)
        if self.c0_s < MIN_C0_S:
            raise InputError(source, "engine.c0_s", f"must be at least {MIN_C0_S:g} s, got {self.c0_s!r}")
        for name in ("c1_s", "c2_s", "prefill_s", "prefill_s_per_token"):
            _positive(source, f"engine.{name}", getattr(self, name), zero_ok=True, seconds=True)
        if self.kv_mode not in KV_MODES:
            raise InputError(source, "engine.kv_mode", f"expected one of {', '.join(KV_MODES)}, got {self.kv_mode!r}")
        for name in ("reserve_ratio_init", "reserve_ratio_min"):
            _positive(source, f"engine.{name}", getattr(self, name), zero_ok=True)
            if getattr(self, name) > 1:
                raise InputError(source, f"engine.{name}", f"must be at most 1, got {getattr(self, name)}")
        if self.reserve_ratio_min > self.reserve_ratio_init:
            # the ratio "decays" from init to min: above init it grew every step without end,
            # until no request fit and the simulator stalled (a traceback; hostile-input audit)
            raise InputError(source, "engine.reserve_ratio_min", f"must be at most reserve_ratio_init "
                             f"({self.reserve_ratio_init:g}), got {self.reserve_ratio_min:g}")
        for name in ("reserve_ratio_decay_steps", "reserve_clip_tokens", "retract_headroom_steps"):
            _positive(source, f"engine.{name}", getattr(self, name), integer=True)
        _positive(source, "engine.replicas", self.replicas, integer=True, most=None)   # at most one per request: below
        _positive(source, "engine.swap_s_per_token", self.swap_s_per_token, zero_ok=True, seconds=True)
        for name, allowed in (("retract_rule", RETRACT_RULES), ("resume", RESUME_MODES), ("router", ROUTERS)):
            if getattr(self, name) not in allowed:
                raise InputError(source, f"engine.{name}", f"expected one of {', '.join(allowed)}, "
                                 f"got {getattr(self, name)!r}")
        for name in ("policy_victims", "priority_preemption", "prefix_sharing"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(source, f"engine.{name}", f"expected true or false, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class TrainerModel:
    """The trainer takes ``groups_per_update`` (U) whole groups per update. An update's tokens
    (prompt + response of every sample) are processed in micro-batches of at most
    ``token_budget`` tokens, so an update takes ``s_per_token * tokens + s_per_microbatch *
    ceil(tokens / token_budget) + optimizer_step_s``. New weights are published (``publish_s``)
    only after all R groups of the round are consumed: the rollout stays on-policy."""

    groups_per_update: int
    token_budget: int
    s_per_token: float
    s_per_microbatch: float = 0.0
    optimizer_step_s: float = 0.0
    publish_s: float = 0.0

    def microbatches(self, tokens: int) -> int:
        return max(1, -(-tokens // self.token_budget))

    def update_time(self, tokens: int) -> float:
        return self.s_per_token * tokens + self.s_per_microbatch * self.microbatches(tokens) + self.optimizer_step_s

    def scaled(self, factor: float) -> "TrainerModel":
        """The same trainer ``factor`` times slower (every time term scaled; the publish too)."""
        return TrainerModel(self.groups_per_update, self.token_budget, self.s_per_token * factor,
                            self.s_per_microbatch * factor, self.optimizer_step_s * factor, self.publish_s * factor)

    def validate(self, source: str) -> None:
        _positive(source, "trainer.groups_per_update", self.groups_per_update, integer=True)
        _positive(source, "trainer.token_budget", self.token_budget, integer=True)
        _positive(source, "trainer.s_per_token", self.s_per_token, zero_ok=True, seconds=True)
        for name in ("s_per_microbatch", "optimizer_step_s", "publish_s"):
            _positive(source, f"trainer.{name}", getattr(self, name), zero_ok=True, seconds=True)


@dataclass(frozen=True)
class RolloutProblem:
    """One round: ``response_tokens[g][k]`` is the response length of sample k of prompt g and
    ``prompt_tokens[g]`` the prompt length. ``arrival`` is the order in which the requests reach
    the engine's queue (the engine-native FCFS order); empty means group-major.
    ``max_response_tokens`` is the sampling limit (the engine's max_new_tokens); 0 means the
    longest response of the round.

    ``rounds`` > 1 makes it several consecutive RL steps: the groups split into ``rounds``
    equal rounds in order, each trained on its own updates and followed by a weight publish;
    weight version v is the one published after round v-1, and round r's requests may run on
    versions >= r - staleness (a policy parameter; 0 is on-policy)."""

    name: str
    prompt_tokens: tuple[int, ...]
    response_tokens: tuple[tuple[int, ...], ...]
    engine: EngineModel
    trainer: TrainerModel
    arrival: tuple[int, ...] = ()
    max_response_tokens: int = 0
    rounds: int = 1
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    kind = "rollout"

    def __post_init__(self):
        src = self.source or self.name
        if not self.response_tokens:
            raise InputError(src, "response_tokens", "no groups (R must be at least 1)")
        k = len(self.response_tokens[0])
        if k < 1:
            raise InputError(src, "K", f"samples per group must be at least 1, got {k}")
        for g, row in enumerate(self.response_tokens):
            if len(row) != k:
                raise InputError(src, f"response_tokens[{g}]", f"{len(row)} samples, group 0 has {k} (K must be equal)")
            for s, n in enumerate(row):
                if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_COUNT:
                    raise InputError(src, f"response_tokens[{g}][{s}]",
                                     f"expected a whole number of tokens from 0 to {MAX_COUNT:,}, got {n!r}")
        if len(self.prompt_tokens) != len(self.response_tokens):
            raise InputError(src, "prompt_tokens", f"{len(self.prompt_tokens)} prompts for {len(self.response_tokens)} groups")
        for g, n in enumerate(self.prompt_tokens):
            if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_COUNT:
                raise InputError(src, f"prompt_tokens[{g}]",
                                 f"expected a whole number of tokens from 1 to {MAX_COUNT:,}, got {n!r}")
        self.engine.validate(src)
        self.trainer.validate(src)
        if isinstance(self.max_response_tokens, bool) or not isinstance(self.max_response_tokens, int) \
                or not 0 <= self.max_response_tokens <= MAX_COUNT:
            raise InputError(src, "max_response_tokens",
                             f"expected a whole number from 0 to {MAX_COUNT:,}, got {self.max_response_tokens!r}")
        if self.max_response_tokens and max(self.lengths) > self.max_response_tokens:
            raise InputError(src, "response_tokens", f"a response of {max(self.lengths)} tokens exceeds "
                             f"max_response_tokens {self.max_response_tokens}")
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int) or self.rounds < 1:
            raise InputError(src, "rounds", f"expected a whole number of rounds, at least 1, got {self.rounds!r}")
        if self.R % self.rounds:
            raise InputError(src, "rounds", f"{self.R} groups do not split into {self.rounds} equal rounds")
        if self.groups_per_round < self.trainer.groups_per_update:
            raise InputError(src, "R", f"R = {self.groups_per_round} groups{' per round' * (self.rounds > 1)} is fewer than "
                             f"U = {self.trainer.groups_per_update} groups per update")
        biggest = max(range(self.n_requests), key=self.footprint)
        need = max(self.prompt_tokens) + self.max_new_tokens
        if need > self.engine.kv_capacity_tokens:
            raise InputError(src, "engine.kv_capacity_tokens",
                             f"{self.engine.kv_capacity_tokens} tokens cannot hold one request "
                             f"(longest prompt + max response = {need} tokens)")
        if self.footprint(biggest) > self.trainer.token_budget:
            raise InputError(src, "trainer.token_budget",
                             f"{self.trainer.token_budget} tokens per micro-batch cannot hold sample {biggest} "
                             f"({self.footprint(biggest)} tokens)")
        if self.engine.replicas > max(self.n_requests, FEW_REPLICAS):   # the simulator holds every replica
            raise InputError(src, "engine.replicas", f"{self.engine.replicas} replicas for {self.n_requests} requests: "
                             f"at most one per request (or {FEW_REPLICAS}); the others would never run one")
        for j, i in enumerate(self.arrival):     # JSON integers: 0.0 would pass the sort below, then index lists
            if isinstance(i, bool) or not isinstance(i, int):
                raise InputError(src, f"arrival[{j}]", f"expected a whole number (a request's index), got {i!r}")
        if self.arrival and sorted(self.arrival) != list(range(self.n_requests)):
            raise InputError(src, "arrival", f"must list every request 0..{self.n_requests - 1} once")

    @property
    def R(self) -> int:
        return len(self.response_tokens)

    @property
    def K(self) -> int:
        return len(self.response_tokens[0])

    @property
    def U(self) -> int:
        return self.trainer.groups_per_update

    @property
    def groups_per_round(self) -> int:
        return self.R // self.rounds

    def round_of(self, g: int) -> int:
        """The round of group g."""
        return g // self.groups_per_round

    @property
    def n_requests(self) -> int:
        return self.R * self.K

    @cached_property
    def lengths(self) -> tuple[int, ...]:
        """Response length of every request, group-major."""
        return tuple(n for row in self.response_tokens for n in row)

    @cached_property
    def prompts(self) -> tuple[int, ...]:
        """Prompt length of every request."""
        return tuple(p for p in self.prompt_tokens for _ in range(self.K))

    @property
    def max_new_tokens(self) -> int:
        return self.max_response_tokens or max(self.lengths)

    @cached_property
    def native_order(self) -> tuple[int, ...]:
        return self.arrival or tuple(range(self.n_requests))

    def footprint(self, i: int) -> int:
        return self.prompt_tokens[i // self.K] + self.response_tokens[i // self.K][i % self.K]

    def group_requests(self, g: int) -> range:
        return range(g * self.K, (g + 1) * self.K)

    @cached_property
    def group_tokens(self) -> tuple[int, ...]:
        """Training tokens of each group (prompt + response of every sample)."""
        return tuple(self.K * p + sum(row) for p, row in zip(self.prompt_tokens, self.response_tokens))

    def update_sizes(self) -> list[int]:
        """Groups per update: U each, the last one of every round takes the remainder when U
        does not divide the round's groups."""
        n, rest = divmod(self.groups_per_round, self.U)
        return ([self.U] * n + ([rest] if rest else [])) * self.rounds

    def to_dict(self) -> dict[str, Any]:
        return {"schema": PROBLEM_SCHEMA, "name": self.name, "source": self.source,
                "engine": asdict(self.engine), "trainer": asdict(self.trainer),
                "prompt_tokens": list(self.prompt_tokens),
                "response_tokens": [list(r) for r in self.response_tokens],
                "arrival": list(self.arrival), "max_response_tokens": self.max_response_tokens,
                "rounds": self.rounds, "meta": self.meta}


def problem_from_dict(doc: dict[str, Any], source: str) -> RolloutProblem:
    """The inverse of ``RolloutProblem.to_dict``; every bad field raises InputError."""
    if not isinstance(doc, dict) or doc.get("schema") != PROBLEM_SCHEMA:
        raise InputError(source, "schema", f"expected {PROBLEM_SCHEMA!r}")
    check_fields(doc, PROBLEM_FIELDS, source)

    def part(key, cls):
        d = doc.get(key)
        if not isinstance(d, dict):
            raise InputError(source, key, "expected an object")
        check_fields(d, [f.name for f in fields(cls)], source, key)
        try:
            return cls(**d)
        except TypeError as exc:
            raise InputError(source, key, str(exc)) from None

    def int_list(key, value):
        if not isinstance(value, list):
            raise InputError(source, key, "expected a list")
        return tuple(value)

    responses = doc.get("response_tokens")
    if not isinstance(responses, list) or not all(isinstance(r, list) for r in responses):
        raise InputError(source, "response_tokens", "expected a list of lists (one per group)")
    check_memory(f"{source}: response_tokens", sum(map(len, responses)), BYTES_PER_REQUEST)   # before the round is built
    name = check_name(doc["name"], source, "name") if "name" in doc else source   # false had become the file's path
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):      # 5 had been accepted and written back
        raise InputError(source, "meta", f"expected an object, got {brief_value(meta)}")
    return RolloutProblem(name=name, source=source,
                          prompt_tokens=int_list("prompt_tokens", doc.get("prompt_tokens")),
                          response_tokens=tuple(tuple(r) for r in responses),
                          engine=part("engine", EngineModel), trainer=part("trainer", TrainerModel),
                          arrival=int_list("arrival", doc.get("arrival", [])),
                          max_response_tokens=doc.get("max_response_tokens", 0), rounds=doc.get("rounds", 1),
                          meta=meta)
