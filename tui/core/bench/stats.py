"""Small statistics without numpy: numpy-style percentiles, mean/std, Student-t confidence intervals."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], q: float) -> float:
    """``np.percentile(values, q)`` with numpy's default ("linear") method; ``values`` need not be sorted.

    An empty sequence gives 0.0, as vllm bench's ``np.percentile(x or 0, q)``.
    """
    if not values:
        return 0.0
    data = sorted(values)
    return percentile_sorted(data, q)


def percentile_sorted(data: Sequence[float], q: float) -> float:
    if not data:
        return 0.0
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    pos = (q / 100.0) * (len(data) - 1)  # numpy: quantile fraction times (n - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    frac = pos - lo
    a, b = float(data[lo]), float(data[hi])
    # numpy's _lerp: a + (b - a) * t, switched to b - (b - a) * (1 - t) for t >= 0.5 (exact at the ends)
    diff = b - a
    return b - diff * (1.0 - frac) if frac >= 0.5 else a + diff * frac


def mean(values: Sequence[float]) -> float:
    """``np.mean(values or 0)``: 0.0 for an empty sequence."""
    if not values:
        return 0.0
    return math.fsum(values) / len(values)


def std(values: Sequence[float]) -> float:
    """Population standard deviation (``np.std``, ddof=0); 0.0 for an empty sequence."""
    n = len(values)
    if n == 0:
        return 0.0
    m = math.fsum(values) / n
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / n)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50.0)


# --- Student t -------------------------------------------------------------------------------------------------


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = tiny if abs(d) < tiny else d
    d = 1.0 / d
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = tiny if abs(d) < tiny else d
        c = 1.0 + aa / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = tiny if abs(d) < tiny else d
        c = 1.0 + aa / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(ln_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Cumulative distribution of Student's t with ``df`` degrees of freedom."""
    x = df / (df + t * t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, x)
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (bisection on the CDF; p within (0, 1))."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be within (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


@dataclass(frozen=True, slots=True)
class Interval:
    """Mean of repeated measurements with a two-sided confidence interval (``half`` is ± around ``mean``)."""

    mean: float
    half: float
    n: int
    level: float = 0.95

    @property
    def low(self) -> float:
        return self.mean - self.half

    @property
    def high(self) -> float:
        return self.mean + self.half

    def text(self, fmt: str = ".2f") -> str:
        if self.n < 2:
            return format(self.mean, fmt)
        return f"{format(self.mean, fmt)} ± {format(self.half, fmt)}"


def confidence_interval(values: Sequence[float], level: float = 0.95) -> Interval:
    """Student-t interval of the mean; one value gives a zero-width interval with n=1 (no spread known)."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    m = mean(values)
    if n == 1:
        return Interval(m, 0.0, 1, level)
    s = math.sqrt(math.fsum((v - m) ** 2 for v in values) / (n - 1))
    t = t_quantile(0.5 + level / 2.0, n - 1)
    return Interval(m, t * s / math.sqrt(n), n, level)
