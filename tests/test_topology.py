from __future__ import annotations

import pytest

from tui.core.errors import InputError
from tui.core.topology import parse_topologies, parse_topology


@pytest.mark.parametrize(
    ("text", "name", "gpus"),
    [("tp1", "tp1", 1), ("TP2", "tp2", 2), ("dp2", "dp2", 2), ("dp4", "dp4", 4), ("1p1d", "1p1d", 2),
     ("2p2d", "2p2d", 4), ("1p3d", "1p3d", 4), ("1p1d-tp2", "1p1d-tp2", 4), ("1p1d-tp1", "1p1d", 2)],
)
def test_grammar(text: str, name: str, gpus: int) -> None:
    t = parse_topology(text)
    assert t.name == name and t.gpus_needed == gpus


@pytest.mark.parametrize("bad", ["", "tp0", "tp", "pd", "0p1d", "1p0d", "dp2x", "tp2-dp2", "1p1d-dp2"])
def test_bad_topologies(bad: str) -> None:
    with pytest.raises(InputError, match="topology"):
        parse_topology(bad)


def test_list_rejects_duplicates() -> None:
    assert [t.name for t in parse_topologies("dp2, tp2,1p1d")] == ["dp2", "tp2", "1p1d"]
    with pytest.raises(InputError, match="twice"):
        parse_topologies("dp2,DP2")
