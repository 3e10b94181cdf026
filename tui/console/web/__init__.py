"""The console in a browser (``disagg-tui web``): textual-serve's page and relay, one app process per tab, behind
a token (:mod:`.server`, :mod:`.session`, :mod:`.page`)."""
