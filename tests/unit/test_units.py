"""Unit parsers: examples, error messages, round trips, and 'parse or UnitError' for any input."""

import re

import pytest
from hypothesis import given, strategies as st

from testbed.model import units
from testbed.model.units import UnitError, format_duration, format_rate, format_size, parse_duration, parse_percent, parse_rate, parse_size


@pytest.mark.parametrize("text,bps", [("100Mbit", 100_000_000), ("1Gbit", 10**9), ("500kbit", 500_000),
                                      ("20mbit", 20_000_000), ("1.5Mbit", 1_500_000), ("64bit", 64),
                                      ("1TBIT", 10**12)])
def test_rate_examples(text, bps):
    assert parse_rate(text) == bps


@pytest.mark.parametrize("value,message", [
    ("10 Mbps", "'10 Mbps' is not a rate (examples: 10Mbit, 1Gbit)"),
    ("1Gbps", "'1Gbps' is not a rate (examples: 10Mbit, 1Gbit)"),
    ("100", "'100' is not a rate (examples: 10Mbit, 1Gbit)"),
    (100, "100 is not a rate (examples: 10Mbit, 1Gbit)"),
    ("-1Mbit", "'-1Mbit' is not a rate (examples: 10Mbit, 1Gbit)"),
    ("0Mbit", "'0Mbit' is not a positive whole number of bit/s (examples: 10Mbit, 1Gbit)"),
    ("0.5bit", "'0.5bit' is not a positive whole number of bit/s (examples: 10Mbit, 1Gbit)"),
])
def test_rate_errors(value, message):
    with pytest.raises(UnitError) as info:
        parse_rate(value)
    assert str(info.value) == message


@pytest.mark.parametrize("text,seconds", [("50us", 50e-6), ("10ms", 0.01), ("2s", 2.0), ("2.5s", 2.5),
                                          ("1m", 60.0), ("0s", 0.0), ("1h", 3600.0), ("100ns", 1e-7)])
def test_duration_examples(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds, rel=1e-12)


@pytest.mark.parametrize("value", ["5", 5, "2 s", "1sec", "-1s", None, True, "1.s"])
def test_duration_errors(value):
    with pytest.raises(UnitError, match=r"is not a duration \(examples: 50us, 10ms, 2.5s, 1m\)"):
        parse_duration(value)


@pytest.mark.parametrize("value,size", [("64MiB", 64 * 2**20), ("1KiB", 1024), ("4096", 4096), (4096, 4096),
                                        ("1MB", 10**6), ("1.5KiB", 1536), ("0", 0), ("2GiB", 2**31)])
def test_size_examples(value, size):
    assert parse_size(value) == size


@pytest.mark.parametrize("value", ["1 MiB", "1mib", "1MiBs", "-4", -4, 1.5, "0.5B", True])
def test_size_errors(value):
    with pytest.raises(UnitError):
        parse_size(value)


@pytest.mark.parametrize("value,pct", [("0.1%", 0.1), ("1%", 1.0), (5, 5.0), (0.25, 0.25), ("100%", 100.0)])
def test_percent_examples(value, pct):
    assert parse_percent(value) == pct


@pytest.mark.parametrize("value", ["101%", 100.5, -1, "1 %", "x%", True])
def test_percent_errors(value):
    with pytest.raises(UnitError):
        parse_percent(value)


@given(st.integers(min_value=1, max_value=units.MAX_RATE_BPS))
def test_rate_round_trip(bps):
    assert parse_rate(format_rate(bps)) == bps


@given(st.integers(min_value=0, max_value=units.MAX_SIZE_BYTES))
def test_size_round_trip(size):
    assert parse_size(format_size(size)) == size


@given(st.floats(min_value=0, max_value=units.MAX_DURATION_S, allow_nan=False, allow_infinity=False))
def test_duration_round_trip(seconds):
    assert parse_duration(format_duration(seconds)) == seconds


@given(st.one_of(st.text(max_size=12), st.integers(), st.floats(), st.none(), st.booleans()))
def test_parsers_parse_or_raise_unit_error(value):
    for parse in (parse_rate, parse_duration, parse_size, parse_percent):
        try:
            parse(value)
        except UnitError:
            pass


@given(st.text(alphabet="0123456789.kKmMgGbitBsuh%", max_size=10))
def test_unit_alphabet_parse_or_raise(value):
    for parse in (parse_rate, parse_duration, parse_size, parse_percent):
        try:
            parse(value)
        except UnitError:
            pass


@pytest.mark.parametrize("parse,value,message", [
    (parse_rate, "1000000000000000000000000Tbit", "above the largest rate accepted (10Tbit"),
    (parse_rate, "18446744073709551616Gbit", "above the largest rate accepted"),
    (parse_duration, "1" + "0" * 60 + "s", "longer than the longest duration accepted (24h)"),
    (parse_duration, "25h", "longer than the longest duration accepted"),
    (parse_size, 2**41, "larger than the largest size accepted (1TiB)"),
    (parse_size, "2TiB", "larger than the largest size accepted"),
])
def test_absurd_values_rejected(parse, value, message):
    with pytest.raises(UnitError, match=re.escape(message)):
        parse(value)


@pytest.mark.parametrize("value,text", [(None, "null"), (True, "true"), (False, "false"), (3, "3"),
                                        ("10 Mbps", "'10 Mbps'"), (float("inf"), ".inf"),
                                        ("a\ud800b", "'a\\ud800b'"), ("x" * 100, "... (102 characters)")])
def test_show_writes_yaml_like_escaped_elided(value, text):
    assert units.show(value).endswith(text)
    units.show(value).encode("ascii" if value != "x" * 100 else "utf-8")


@given(st.floats())
def test_format_duration_never_raises(seconds):
    assert isinstance(format_duration(seconds), str)
