"""Numbers from files we do not control: huge JSON integers once raised OverflowError in readers that must not."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rlwatch.common.numbers import finite_float, finite_int
from rlwatch.sources.gpu import parse_simulated


def test_huge_and_odd_values() -> None:
    assert finite_float(10**400) is None and finite_int(10**400) == 10**400
    assert finite_float(float("nan")) is None and finite_int(float("inf")) is None
    assert finite_float(True) is None and finite_int("3") is None
    assert finite_int(2.7) == 2 and finite_float(3) == 3.0


def test_a_simulated_gpu_file_with_a_huge_number_is_read_not_raised() -> None:
    parsed = parse_simulated({"gpus": [{"index": 0, "util": 10**400, "mem_used_bytes": 10**400}]})
    assert parsed is not None
    gpu = parsed[0][0]
    assert gpu.util is None and gpu.mem_used_bytes == 10**400


@given(st.one_of(st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.text(), st.none()))
def test_never_raises(value: object) -> None:
    finite_float(value)
    finite_int(value)
