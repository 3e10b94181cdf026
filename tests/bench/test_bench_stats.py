"""Statistics without numpy: percentiles equal numpy's (linear) method; Student-t intervals."""

from __future__ import annotations

import math

import pytest

from tui.core.bench import stats

DATA = [0.5, 3.0, 1.25, 7.0, 2.0, 11.5, 4.75]
# np.percentile(DATA, q) with numpy 2.x, method "linear" (the default), recorded once
NUMPY = {0: 0.5, 10: 0.9500000000000001, 50: 3.0, 90: 8.8, 99: 11.229999999999997, 100: 11.5, 33.3: 1.9985}


@pytest.mark.parametrize(("q", "expected"), sorted(NUMPY.items()))
def test_percentile_matches_numpy(q: float, expected: float) -> None:
    assert stats.percentile(DATA, q) == pytest.approx(expected, rel=1e-15, abs=1e-15)


def test_percentile_by_hand() -> None:
    # sorted 1, 2, 3, 4: position (n-1)·q = 3·0.9 = 2.7 -> 3 + 0.7·(4 - 3)
    assert stats.percentile([4, 1, 3, 2], 90) == pytest.approx(3.7)
    assert stats.percentile([4, 1, 3, 2], 50) == 2.5
    assert stats.percentile([7.0], 99) == 7.0
    assert stats.percentile([], 99) == 0.0  # vllm: np.percentile(x or 0, p)
    with pytest.raises(ValueError):
        stats.percentile([1.0], 101)


def test_mean_std_median_like_numpy() -> None:
    assert stats.mean(DATA) == pytest.approx(4.285714285714286, rel=1e-15)
    assert stats.std(DATA) == pytest.approx(3.5867528376467965, rel=1e-14)  # population, ddof=0
    assert stats.median(DATA) == 3.0
    assert stats.mean([]) == 0.0
    assert stats.std([]) == 0.0


@pytest.mark.parametrize(("df", "t975"), [(1, 12.7062047), (2, 4.3026527), (4, 2.7764451), (10, 2.2281389),
                                          (30, 2.0422725), (1000, 1.9623391)])
def test_student_t_quantiles(df: int, t975: float) -> None:
    assert stats.t_quantile(0.975, df) == pytest.approx(t975, rel=1e-6)
    assert stats.t_quantile(0.025, df) == pytest.approx(-t975, rel=1e-6)
    assert stats.t_cdf(0.0, df) == pytest.approx(0.5)


def test_confidence_interval() -> None:
    iv = stats.confidence_interval([10.0, 12.0, 11.0])
    # s = 1, n = 3, t(0.975, 2) = 4.3027 -> half = 4.3027/sqrt(3)
    assert iv.mean == 11.0
    assert iv.half == pytest.approx(4.3026527 / math.sqrt(3), rel=1e-6)
    assert iv.low < 11.0 < iv.high
    assert "±" in iv.text()
    one = stats.confidence_interval([5.0])
    assert (one.mean, one.half, one.n) == (5.0, 0.0, 1)
