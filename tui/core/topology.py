"""Topology grammar: ``tp<N>``, ``dp<N>``, ``<X>p<Y>d`` and ``<X>p<Y>d-tp<K>`` (lowercase canonical)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tui.core.errors import InputError

_TP = re.compile(r"^tp([1-9]\d*)\Z")
_DP = re.compile(r"^dp([1-9]\d*)\Z")
_PD = re.compile(r"^([1-9]\d*)p([1-9]\d*)d(?:-tp([1-9]\d*))?\Z")

GRAMMAR = "tp<N>, dp<N>, <X>p<Y>d or <X>p<Y>d-tp<K> (e.g. tp2, dp2, 1p1d, 2p2d, 1p1d-tp2)"


@dataclass(frozen=True, slots=True)
class Topology:
    """A serving layout. ``kind`` is ``tp`` (one server), ``dp`` (one endpoint, N replicas) or ``pd``."""

    kind: str
    tp: int = 1
    dp: int = 1
    prefill: int = 0
    decode: int = 0

    @property
    def name(self) -> str:
        if self.kind == "tp":
            return f"tp{self.tp}"
        if self.kind == "dp":
            return f"dp{self.dp}"
        base = f"{self.prefill}p{self.decode}d"
        return base if self.tp == 1 else f"{base}-tp{self.tp}"

    @property
    def disaggregated(self) -> bool:
        return self.kind == "pd"

    @property
    def gpus_needed(self) -> int:
        if self.kind == "tp":
            return self.tp
        if self.kind == "dp":
            return self.dp
        return (self.prefill + self.decode) * self.tp

    @property
    def family(self) -> str:
        """``tp``, ``dp`` or ``pd``: the label used in comparisons and per-profile overrides."""
        return self.kind

    def __str__(self) -> str:
        return self.name


def parse_topology(text: str) -> Topology:
    s = text.strip().lower()
    if not s:
        raise InputError(f"empty; expected {GRAMMAR}", field="--topology")
    if m := _TP.match(s):
        return Topology("tp", tp=int(m.group(1)))
    if m := _DP.match(s):
        return Topology("dp", dp=int(m.group(1)))
    if m := _PD.match(s):
        return Topology("pd", tp=int(m.group(3) or 1), prefill=int(m.group(1)), decode=int(m.group(2)))
    raise InputError(f"unknown topology {text!r}; expected {GRAMMAR}", field="--topology")


def parse_topologies(text: str) -> list[Topology]:
    """A comma-separated list (``tp2,dp2,1p1d``); an empty item (``dp2,,tp2``, a trailing comma) is refused, not
    skipped: it is a typo more often than not, and a campaign without the topology meant runs for an hour."""
    parts = [p.strip() for p in text.split(",")]
    items = [t for t in parts if t]
    if not items:
        raise InputError(f"no topology given; expected {GRAMMAR}", field="--topology")
    if len(items) != len(parts):
        where = next(i for i, t in enumerate(parts, 1) if not t)
        raise InputError(f"empty item {where} in {text!r}; expected a comma-separated list of {GRAMMAR}",
                         field="--topology")
    out: list[Topology] = []
    for item in items:
        topo = parse_topology(item)
        if topo in out:
            raise InputError(f"topology {topo.name} given twice", field="--topology")
        out.append(topo)
    return out
