"""A parser for the Prometheus text exposition format (0.0.4, and the OpenMetrics 1.0 text it overlaps with).

What vLLM 0.24's ``/metrics`` serves (prometheus_client): ``# HELP``/``# TYPE`` lines, counters (``foo_total``, plus
``foo_created`` declared as its own gauge family), gauges, histograms (``_bucket`` with an ``le`` label, ``_sum``,
``_count``), summaries, untyped samples, label values with ``\\\\``, ``\\"`` and ``\\n`` escapes, ``+Inf``/``-Inf``/
``NaN`` values. Tolerated as well: sample timestamps, OpenMetrics exemplars (``# {trace_id="…"} 1.0``), ``# EOF``,
free comments, ``\\r\\n`` line ends. Malformed lines are reported as :class:`ParseError` values (or raised with
``strict=True``), never silently dropped.

Speed matters (a ~60 kB page per server per second): one compiled regular expression per sample line, label
strings memoised (the same ``{engine="0",le="0.5",model_name="…"}`` recurs on every scrape), and ``keep`` lets the
poller skip whole families by name prefix (``python_*``, ``http_*``) before any work is spent on them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

COUNTER, GAUGE, HISTOGRAM, SUMMARY, UNTYPED = "counter", "gauge", "histogram", "summary", "untyped"
# OpenMetrics extras, accepted as declared
GAUGEHISTOGRAM, INFO, STATESET, UNKNOWN = "gaugehistogram", "info", "stateset", "unknown"
TYPES = frozenset({COUNTER, GAUGE, HISTOGRAM, SUMMARY, UNTYPED, GAUGEHISTOGRAM, INFO, STATESET, UNKNOWN})

# which sample-name suffixes belong to a family of each type
_SUFFIXES: dict[str, tuple[str, ...]] = {
    COUNTER: ("_total", "_created"),
    HISTOGRAM: ("_bucket", "_sum", "_count", "_created"),
    GAUGEHISTOGRAM: ("_bucket", "_gsum", "_gcount"),
    SUMMARY: ("_sum", "_count", "_created"),
    INFO: ("_info",),
}
_ALL_SUFFIXES = ("_bucket", "_sum", "_count", "_created", "_total", "_gsum", "_gcount", "_info")

Labels = tuple[tuple[str, str], ...]

_SAMPLE = re.compile(
    r"([a-zA-Z_:][a-zA-Z0-9_:]*)[ \t]*"  # name
    r"(?:\{((?:[^\"}]|\"(?:[^\"\\]|\\.)*\")*)\})?"  # {labels}
    r"[ \t]+([^ \t#]+)"  # value
    r"(?:[ \t]+([^ \t#]+))?"  # timestamp
    r"[ \t]*(?:#.*)?$"  # exemplar or trailing comment
)
# the common case: no "}" inside a label value (the label string is then validated, so a "}" inside quotes falls
# back to the full pattern above)
_SAMPLE_FAST = re.compile(
    r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?[ \t]+([^ \t#]+)(?:[ \t]+([^ \t#]+))?[ \t]*(?:#.*)?$"
)
_LABEL = re.compile(r"[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*\"((?:[^\"\\]|\\.)*)\"[ \t]*(,|$)")
_ESCAPE = re.compile(r"\\(.)")
_UNESCAPE_MAP = {"n": "\n", "\\": "\\", '"': '"'}


class PromParseError(ValueError):
    """Raised by ``parse(..., strict=True)`` for the first malformed line."""


@dataclass(frozen=True, slots=True)
class ParseError:
    line_no: int  # 1-based
    line: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line_no}: {self.message}: {self.line[:120]!r}"


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: Labels
    value: float
    timestamp: float | None = None

    def label(self, key: str) -> str | None:
        for k, v in self.labels:
            if k == key:
                return v
        return None

    def matches(self, match: dict[str, str]) -> bool:
        if not match:
            return True
        have = dict(self.labels)
        return all(have.get(k) == v for k, v in match.items())


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    type: str = UNTYPED
    help: str | None = None
    samples: tuple[Sample, ...] = ()


@dataclass(frozen=True, slots=True)
class Bucket:
    le: float
    count: float  # cumulative


@dataclass(frozen=True, slots=True)
class Histogram:
    """One histogram (or several merged by summing equal ``le`` buckets): cumulative buckets ending with +Inf."""

    buckets: tuple[Bucket, ...]
    sum: float
    count: float

    def quantile(self, q: float) -> float | None:
        return histogram_quantile(q, self.buckets)


def histogram_quantile(q: float, buckets: tuple[Bucket, ...] | list[Bucket]) -> float | None:
    """Prometheus' ``histogram_quantile``: linear interpolation inside the bucket holding rank ``q × total``.

    Returns None for an empty histogram. A rank that falls in the +Inf bucket gives the highest finite bound.
    """
    if not buckets or not 0.0 <= q <= 1.0:
        return None
    total = buckets[-1].count
    if not total > 0:
        return None
    rank = q * total
    prev_le = 0.0
    prev_count = 0.0
    for i, b in enumerate(buckets):
        if b.count >= rank:
            if math.isinf(b.le):
                return buckets[i - 1].le if i > 0 else None
            if i == 0 and b.le <= 0:
                return b.le
            width = b.count - prev_count
            if width <= 0:
                return b.le
            return prev_le + (b.le - prev_le) * (rank - prev_count) / width
        prev_le, prev_count = b.le, b.count
    return prev_le


@dataclass(frozen=True, slots=True)
class Exposition:
    """A parsed page: families in page order, every sample indexed by its sample name."""

    families: dict[str, Family]
    by_name: dict[str, tuple[Sample, ...]]
    errors: tuple[ParseError, ...] = ()
    comments: int = 0  # free comment lines seen (not HELP/TYPE)

    def __len__(self) -> int:
        return sum(len(f.samples) for f in self.families.values())

    def family(self, name: str) -> Family | None:
        return self.families.get(name)

    def samples(self, name: str, **match: str) -> Iterator[Sample]:
        for s in self.by_name.get(name, ()):
            if s.matches(match):
                yield s

    def value(self, name: str, **match: str) -> float | None:
        """The first matching sample's value, or None."""
        for s in self.samples(name, **match):
            return s.value
        return None

    def total(self, name: str, **match: str) -> float | None:
        """The sum of every matching sample (e.g. over ``engine`` labels), or None when there is none."""
        found = False
        acc = 0.0
        for s in self.samples(name, **match):
            found = True
            acc += s.value
        return acc if found else None

    def histogram(self, name: str, **match: str) -> Histogram | None:
        """The histogram family ``name`` (without ``_bucket``), summed over every series that matches."""
        counts: dict[float, float] = {}
        for s in self.samples(name + "_bucket", **match):
            le_text = s.label("le")
            if le_text is None:
                continue
            le = parse_value(le_text)
            counts[le] = counts.get(le, 0.0) + s.value
        if not counts:
            return None
        total_sum = self.total(name + "_sum", **match) or 0.0
        total_count = self.total(name + "_count", **match)
        buckets = tuple(Bucket(le, c) for le, c in sorted(counts.items()))
        return Histogram(buckets, total_sum, total_count if total_count is not None else buckets[-1].count)


def parse_value(text: str) -> float:
    """A sample value or ``le``: Go float syntax, including ``+Inf``, ``-Inf`` and ``NaN``."""
    return float(text)


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    return _ESCAPE.sub(lambda m: _UNESCAPE_MAP.get(m.group(1), "\\" + m.group(1)), text)


def _parse_labels(raw: str) -> Labels | None:
    out: list[tuple[str, str]] = []
    pos = 0
    end = len(raw)
    while pos < end:
        m = _LABEL.match(raw, pos)
        if m is None:
            if raw[pos:].strip() == "":
                break
            return None
        out.append((m.group(1), _unescape(m.group(2))))
        pos = m.end()
        if m.group(3) == "":  # matched at the end
            break
    return tuple(out)


class _Builder:
    __slots__ = ("help", "name", "samples", "type")

    def __init__(self, name: str) -> None:
        self.name = name
        self.type = UNTYPED
        self.help: str | None = None
        self.samples: list[Sample] = []

    def owns(self, sample_name: str) -> bool:
        if sample_name == self.name:
            return True
        if not sample_name.startswith(self.name):
            return False
        return sample_name[len(self.name):] in _SUFFIXES.get(self.type, ())


def parse(text: str, *, strict: bool = False, keep: tuple[str, ...] | None = None,
          label_cache: dict[str, Labels] | None = None) -> Exposition:
    """Parse an exposition page.

    ``keep``: only families whose name starts with one of these prefixes (others are skipped unread).
    ``label_cache``: a dict reused across scrapes of one server to memoise label strings (bounded by the caller).
    """
    families: dict[str, _Builder] = {}
    by_name: dict[str, list[Sample]] = {}
    owner_of: dict[str, _Builder] = {}
    errors: list[ParseError] = []
    comments = 0
    cache = label_cache if label_cache is not None else {}
    current: _Builder | None = None

    def fail(no: int, line: str, message: str) -> None:
        err = ParseError(no, line, message)
        if strict:
            raise PromParseError(str(err))
        errors.append(err)

    def family_for(name: str) -> _Builder:
        b = families.get(name)
        if b is None:
            b = _Builder(name)
            families[name] = b
        return b

    for no, line in enumerate(text.split("\n"), 1):
        if line.endswith("\r"):
            line = line[:-1]
        if not line or line.isspace():
            continue
        if keep is not None and not line.startswith(keep) and line[0] != "#":
            continue
        if line[0] == "#":
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                if keep is not None and not name.startswith(keep):
                    continue
                rest = parts[3] if len(parts) > 3 else ""
                b = family_for(name)
                if parts[1] == "HELP":
                    b.help = _unescape(rest)
                else:
                    kind = rest.strip().lower()
                    if kind not in TYPES:
                        fail(no, line, f"unknown metric type {rest.strip()!r}")
                        continue
                    b.type = kind
                    # sample names already routed to another family stay where they are; new ones find this one
                current = b
            elif len(parts) >= 2 and parts[1] == "EOF":
                break
            else:
                comments += 1
            continue
        m = _SAMPLE_FAST.match(line)
        labels: Labels | None = ()
        if m is not None and m.group(2):
            raw_labels = m.group(2)
            labels = cache.get(raw_labels)
            if labels is None:
                labels = _parse_labels(raw_labels)
                if labels is not None:
                    cache[raw_labels] = labels
        if m is None or labels is None:
            m = _SAMPLE.match(line)
            if m is None:
                fail(no, line, "not a sample line")
                continue
            labels = ()
            if m.group(2):
                raw_labels = m.group(2)
                labels = cache.get(raw_labels)
                if labels is None:
                    labels = _parse_labels(raw_labels)
                    if labels is None:
                        fail(no, line, "malformed labels")
                        continue
                    cache[raw_labels] = labels
        name, raw_value, raw_ts = m.group(1), m.group(3), m.group(4)
        try:
            value = float(raw_value)
        except ValueError:
            fail(no, line, f"bad value {raw_value!r}")
            continue
        ts: float | None = None
        if raw_ts is not None:
            try:
                ts = float(raw_ts)
            except ValueError:
                fail(no, line, f"bad timestamp {raw_ts!r}")
                continue
        fam = owner_of.get(name)
        if fam is None:
            if current is not None and current.owns(name):
                fam = current
            else:
                fam = _find_family(name, families) or family_for(name)
            owner_of[name] = fam
        sample = Sample(name, labels, value, ts)
        fam.samples.append(sample)
        lst = by_name.get(name)
        if lst is None:
            by_name[name] = [sample]
        else:
            lst.append(sample)
    return Exposition(
        families={k: Family(b.name, b.type, b.help, tuple(b.samples)) for k, b in families.items()},
        by_name={k: tuple(v) for k, v in by_name.items()},
        errors=tuple(errors),
        comments=comments,
    )


def _find_family(name: str, families: dict[str, _Builder]) -> _Builder | None:
    b = families.get(name)
    if b is not None:
        return b
    for suffix in _ALL_SUFFIXES:
        if name.endswith(suffix):
            base = families.get(name[: -len(suffix)])
            if base is not None and base.owns(name):
                return base
    return None


# --- rendering (the inverse, for round-trip checks and for the simulated server's tests) ------------------------


def format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def render_sample(s: Sample) -> str:
    labels = ""
    if s.labels:
        labels = "{" + ",".join(f'{k}="{_escape_label(v)}"' for k, v in s.labels) + "}"
    ts = "" if s.timestamp is None else " " + format_value(s.timestamp)
    return f"{s.name}{labels} {format_value(s.value)}{ts}"


def render(exp: Exposition) -> str:
    """Text exposition 0.0.4 of a parsed page (HELP and TYPE kept where they were declared)."""
    lines: list[str] = []
    for fam in exp.families.values():
        if fam.help is not None:
            lines.append(f"# HELP {fam.name} {_escape_help(fam.help)}")
        if fam.type != UNTYPED or fam.help is not None:
            lines.append(f"# TYPE {fam.name} {fam.type}")
        lines.extend(render_sample(s) for s in fam.samples)
    return "\n".join(lines) + "\n"


@dataclass
class LabelCache:
    """A bounded memo of label strings for one server's successive scrapes."""

    limit: int = 20_000
    data: dict[str, Labels] = field(default_factory=dict)

    def get(self) -> dict[str, Labels]:
        if len(self.data) > self.limit:
            self.data.clear()
        return self.data


__all__ = [
    "COUNTER", "GAUGE", "HISTOGRAM", "SUMMARY", "TYPES", "UNTYPED", "Bucket", "Exposition", "Family", "Histogram",
    "LabelCache", "ParseError", "PromParseError", "Sample", "format_value", "histogram_quantile", "parse",
    "parse_value", "render", "render_sample",
]
