"""Random model inputs (profiles/random_feeds.py): the same values as one numpy draw of the whole
shape, without its float64 copy, and refused above the memory cap before any is drawn."""
import tracemalloc

import numpy as np
import pytest

from pipeplan.core.errors import InputError
from pipeplan.profiles.random_feeds import DRAW_BYTES, DRAW_CHUNK, check_feeds, draw_bytes, frame_shape, random_feed


def _at_once(rng, shape, dtype):
    """How the profiler, export's calibration and run drew them before."""
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    return rng.integers(0, 2, size=shape).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "bool", "int64", "uint8", "int32"])
@pytest.mark.parametrize("shape", [(3, DRAW_CHUNK // 2 + 7), (1,), (0, 4), (2, 0)])
def test_the_same_values_and_generator_state_as_one_draw(dtype, shape):
    a, b = np.random.default_rng(7), np.random.default_rng(7)
    got, want = random_feed(a, shape, dtype), _at_once(b, shape, dtype)
    assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)
    assert a.standard_normal() == b.standard_normal()          # the next input's draws are unchanged too


def test_no_float64_copy_of_the_whole_input():
    """A float32 input of 4M elements (16 MiB) had cost its float64 draw (32 MiB) and the cast."""
    n = 4 * DRAW_CHUNK
    tracemalloc.start()
    try:
        random_feed(np.random.default_rng(0), (n,), np.float32)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert 4 * n <= peak < 4 * n + DRAW_BYTES * DRAW_CHUNK + (4 << 20)


def test_the_inputs_together_are_checked_against_the_cap(monkeypatch):
    monkeypatch.setenv("PIPEPLAN_MAX_MEMORY_MB", "128")
    one = ("X0", (10 << 20,), np.dtype(np.float32))                 # 40 MiB
    check_feeds([one], "m.onnx", "graph.input")                       # fits, with the chunk
    four = [(f"X{i}", one[1], one[2]) for i in range(4)]              # 160 MiB together
    with pytest.raises(InputError) as e:
        check_feeds(four, "m.onnx", "graph.input")
    assert (e.value.source, e.value.field) == ("m.onnx", "graph.input")
    assert "X0 [10485760] float32 and 3 more" in e.value.message and "above the limit of 128 MiB" in e.value.message
    with pytest.raises(InputError, match="4 frames held at once"):
        check_feeds([one], "manifest.json", "inputs", frames=4)


def test_a_draw_holds_one_chunk_of_the_largest_input_at_most():
    small, big = ("a", (2, 3), np.dtype(np.float32)), ("b", (DRAW_CHUNK + 1,), np.dtype(np.uint8))
    assert draw_bytes([small]) == 6 * DRAW_BYTES and draw_bytes([small, big]) == DRAW_CHUNK * DRAW_BYTES
    assert draw_bytes([]) == 0


def test_unknown_dimensions_are_one():
    assert frame_shape([None, "batch", -1, 0, 3]) == (1, 1, 1, 0, 3)
