"""Random inputs for running a model: ``profile``'s and ``instance MODEL``'s timed runs,
``export``'s batch-norm calibration and ``run``'s frames.

A model of a few bytes can declare inputs of any size (one float input of [300000000] is 1.2
GB; each input is at most 2 GiB, onnx_bounds.py, but not their total), and the inputs are numpy
arrays outside ONNX Runtime's capped arena. So their bytes are estimated from the shapes (every
input; symbolic or unknown dimensions as the caller sets them) and refused above the memory cap
before anything is drawn (:func:`check_feeds`), and they are drawn a chunk at a time into arrays
of their own type (:func:`random_feed`), so no float64 copy of a whole input exists: a float32
input of 300,000,000 elements had taken 3.6 GB (the float64 draw and its cast) under a cap of
256 MiB.

The values are those of one numpy draw of the whole shape (standard-normal floats, random
booleans, integers 0 or 1, valid as indices): the chunks follow one another in the generator's
stream, so a seed gives the same inputs as a draw at once and leaves the generator in the same
state (tested).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
from onnx import ModelProto, helper

from pipeplan.core.sizes import check_bytes

DRAW_CHUNK = 1 << 20            # elements drawn at once (float64 or int64) before the cast
DRAW_BYTES = 8                  # per element of that chunk, held beside the inputs

Feed = tuple[str, tuple[int, ...], np.dtype]    # name, shape of one frame, element type


def frame_shape(dims: Iterable) -> tuple[int, ...]:
    """The shape of one frame: symbolic (text) or unknown (None, negative) dimensions are 1."""
    return tuple(d if isinstance(d, int) and d >= 0 else 1 for d in dims)


def graph_feeds(model: ModelProto) -> list[Feed]:
    """A model's inputs (those no initializer fills) as the profiler and a run feed them, read
    from the model before any session exists: symbolic or unknown dimensions 1, an element type
    numpy lacks counted as float32 (as the profiler draws it)."""
    filled = {t.name for t in model.graph.initializer}
    out = []
    for v in model.graph.input:
        if v.name in filled:
            continue
        t = v.type.tensor_type
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type))
        except (KeyError, ValueError, TypeError):
            dtype = np.dtype(np.float32)
        out.append((v.name, frame_shape(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim), dtype))
    return out


def feed_bytes(feeds: Iterable[Feed]) -> int:
    return sum(math.prod(shape) * np.dtype(dtype).itemsize for _, shape, dtype in feeds)


def draw_bytes(feeds: Iterable[Feed]) -> int:
    """The float64 or int64 chunk one draw holds beside the inputs (at most DRAW_CHUNK elements)."""
    return DRAW_BYTES * min(DRAW_CHUNK, max((math.prod(shape) for _, shape, _ in feeds), default=0))


def check_feeds(feeds: Sequence[Feed], source: str, field: str, *, frames: int = 1) -> None:
    """Refuse ``frames`` frames of ``feeds`` (held at once) and one draw's chunk above the memory
    cap, naming ``source`` and ``field`` and the largest input."""
    if not feeds:
        return
    name, shape, dtype = max(feeds, key=lambda f: feed_bytes([f]))
    largest = f"{name} {list(shape)} {np.dtype(dtype).name}"
    what = (f"{'one frame' if frames == 1 else f'{frames} frames held at once'} of random inputs "
            f"({largest}" + (f" and {len(feeds) - 1} more" if len(feeds) > 1 else "") + ")")
    check_bytes(source, field, what, frames * feed_bytes(feeds) + draw_bytes(feeds))


def random_feed(rng: np.random.Generator, shape: tuple[int, ...], dtype) -> np.ndarray:
    """Standard-normal floats, random booleans, or integers 0 or 1 of ``dtype``, drawn
    DRAW_CHUNK elements at a time (the same values as one draw of ``shape`` cast)."""
    dtype = np.dtype(dtype)
    out = np.empty(shape, dtype)
    flat = out.reshape(-1)          # a view: out is C-contiguous
    for lo in range(0, flat.size, DRAW_CHUNK):
        n = min(DRAW_CHUNK, flat.size - lo)
        if np.issubdtype(dtype, np.floating):
            flat[lo:lo + n] = rng.standard_normal(n)
        elif dtype == np.bool_:
            flat[lo:lo + n] = rng.random(n) < 0.5
        else:
            flat[lo:lo + n] = rng.integers(0, 2, size=n)
    return out


def random_feeds(rng: np.random.Generator, feeds: Iterable[Feed]) -> dict[str, np.ndarray]:
    """:func:`random_feed` of every input, in order, from one generator."""
    return {name: random_feed(rng, shape, dtype) for name, shape, dtype in feeds}
