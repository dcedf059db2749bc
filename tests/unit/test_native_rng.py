"""PCG32: the Python generator (the specification) against its C twin, and the published
reference stream."""
import pytest
from hypothesis import given, settings, strategies as st

from agents.mrc import native
from agents.mrc.rng import Pcg32

U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)


@pytest.fixture(scope="module")
def core():
    mod = native.load()
    if mod is None:
        pytest.skip("native engine not built (MRC_NATIVE_REQUIRE=1 makes this an error)")
    return mod


def test_reference_stream():
    # pcg32-demo (O'Neill's pcg-c-basic) seeds with (42, 54); its first outputs:
    rng = Pcg32(42, 54)
    assert [rng.next_u32() for _ in range(6)] == [
        0xa15c02b7, 0x7b47f409, 0xba1d3330, 0x83d2f293, 0xbfa4784b, 0xcbed606e]


def test_randbelow_range_and_errors():
    rng = Pcg32(1)
    assert all(0 <= rng.randbelow(n) < n for n in range(1, 2000))
    for bad in (0, -1, (1 << 32) + 1):
        with pytest.raises(ValueError):
            rng.randbelow(bad)


@settings(max_examples=200, deadline=None)
@given(seed=U64, stream=U64, ops=st.lists(st.one_of(
    st.just(("u32",)), st.just(("random",)),
    st.tuples(st.just("below"), st.integers(min_value=1, max_value=1 << 32)),
    st.tuples(st.just("shuffle"), st.integers(min_value=0, max_value=70))), max_size=60))
def test_engines_draw_the_same(core, seed, stream, ops):
    py, c = Pcg32(seed, stream), core.Pcg32(seed, stream)
    assert (py.state, py.inc) == (c.state, c.inc)
    for op in ops:
        if op[0] == "u32":
            assert py.next_u32() == c.next_u32()
        elif op[0] == "random":
            assert py.random() == c.random()
        elif op[0] == "below":
            assert py.randbelow(op[1]) == c.randbelow(op[1])
        else:
            a, b = list(range(op[1])), list(range(op[1]))
            py.shuffle(a)
            c.shuffle(b)
            assert a == b
        assert (py.state, py.inc) == (c.state, c.inc)


def test_from_random_is_seeded_by_the_job_seed():
    import random
    a, b = Pcg32.from_random(random.Random("7:0:a")), Pcg32.from_random(random.Random("7:0:a"))
    assert [a.next_u32() for _ in range(4)] == [b.next_u32() for _ in range(4)]
    c = Pcg32.from_random(random.Random("7:0:b"))
    assert [Pcg32.from_random(random.Random("7:0:a")).next_u32() for _ in range(1)] != [c.next_u32()]
