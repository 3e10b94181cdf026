"""disagg-tui: decide by measurement how to serve a model on a GPU host (TP, DP or disaggregated P/D)."""

__version__ = "0.1.0"
