"""units.py against figures worked out by hand: each expected string below is the arithmetic in its comment."""

import math

import pytest

from gpufeed.units import (
    NA,
    bytes_as,
    bytes_text,
    decimal_bytes,
    duration_text,
    fixed,
    human_bytes,
    money_text,
    not_available,
    percent,
    plain_number,
    rate_text,
    size_text,
)


def test_not_available_is_one_spelling_with_or_without_its_reason():
    assert NA == "NA"
    assert not_available() == "NA" and not_available("no driver") == "NA (no driver)"


@pytest.mark.parametrize("function", [plain_number, fixed, percent, bytes_text, size_text])
def test_every_formatter_writes_na_for_a_missing_figure(function):
    assert function(None) == "NA"


def test_bytes_in_a_binary_unit():
    assert bytes_text(1536 * 2**20) == "1.5 GiB"  # 1,610,612,736 B / 2^30 = 1.5
    assert bytes_text(1536 * 2**20, "MiB", 0) == "1,536 MiB"
    assert bytes_text(1536 * 2**20, "MiB", 0, grouped=False) == "1536 MiB"
    assert bytes_text(3 * 2**30 + 2**29, "GiB", 2) == "3.50 GiB"  # 3.5 GiB
    assert bytes_text(80 * 2**30, "GiB", 0) == "80 GiB"
    assert bytes_text(10_000, "KiB", 0) == "10 KiB"  # 10,000 / 1,024 = 9.77, rounded
    assert bytes_as(3 * 2**20, "MiB") == 3.0 and bytes_as(None, "MiB") is None


def test_bytes_in_a_decimal_unit():
    assert bytes_text(1_234_567_890, "GB", 2) == "1.23 GB"  # 1.23456789e9 / 1e9
    assert bytes_text(2_500_000, "MB", 1) == "2.5 MB"


def test_size_switches_to_mebibytes_under_one_gibibyte():
    assert size_text(2**30) == "1.0 GiB"  # exactly 1 GiB is shown in GiB
    assert size_text(2**30 - 1) == "1,024 MiB"  # one byte less: 1,023.999999 MiB, rounded to 0 decimals
    assert size_text(46_796_608) == "45 MiB"  # 46,796,608 / 2^20 = 44.63
    assert size_text(46_796_608, gib_digits=2, mib_digits=1) == "44.6 MiB"
    assert size_text(5 * 2**30 // 4, gib_digits=2, mib_digits=1) == "1.25 GiB"


def test_human_bytes_as_pack_prints_them():
    assert human_bytes(0) == "0 B" and human_bytes(1023) == "1023 B"
    assert human_bytes(1536) == "1.5 KiB"  # 1,536 / 1,024
    assert human_bytes(1536 * 2**20) == "1.5 GiB"
    assert human_bytes(5 * 2**40) == "5120.0 GiB"  # stops at GiB, without a separator


def test_decimal_bytes_as_the_cache_limit_is_given():
    assert decimal_bytes(999) == "999 B" and decimal_bytes(1000) == "1.0 kB"
    assert decimal_bytes(20 * 10**9) == "20.0 GB" and decimal_bytes(1_500_000_000_000) == "1.5 TB"


def test_rates_under_100_keep_three_significant_digits():
    assert rate_text(1979.4, "samples/s") == "1,979 samples/s" and rate_text(123456.0) == "123,456"
    assert rate_text(12.54) == "12.5" and rate_text(0.04123) == "0.0412" and rate_text(None) == NA
    assert rate_text(0.0) == "0"


def test_fixed_decimals_and_rates():
    assert fixed(1979.4, 0, "samples/s") == "1,979 samples/s"
    assert fixed(12.345, 1, "GB/s", grouped=False) == "12.3 GB/s"
    assert fixed(1234.5678, 2) == "1,234.57" and fixed(1234.5678, 2, grouped=False) == "1234.57"


def test_percent():
    assert percent(0.1234) == "12%" and percent(0.1234, 1) == "12.3%" and percent(1.0) == "100%"


def test_plain_number_by_size():
    assert plain_number(12345) == "12,345"  # an int: every digit, grouped
    assert plain_number(3.14159) == "3.14"  # 3 significant digits
    assert plain_number(999.4) == "999" and plain_number(1234.6) == "1,235"  # whole from 1,000 up
    assert plain_number(123456.0) == "1.23e+05" and plain_number(0.000123) == "0.000123"
    assert plain_number(0.00002) == "2e-05"  # under 1e-3: 3 significant digits in the exponent form
    assert plain_number(0.0) == "0" and plain_number(math.nan) == "NA" and plain_number(math.inf) == "inf"
    assert plain_number(2 / 3, 2) == "0.67"


def test_durations_from_hours():
    assert duration_text(3.24) == "3.2 h"
    assert duration_text(0.25) == "15 min"  # a quarter of an hour
    assert duration_text(40 / 3600) == "40 s"
    assert duration_text(5 / 3_600_000) == "5 ms"  # 5 ms in hours
    assert duration_text(1e-9) == "under 1 ms"  # 3.6 µs


def test_money():
    assert money_text(1234.567) == "$1,234.57" and money_text(0.005) == "$0.01" and money_text(0.001) == "under a cent"
