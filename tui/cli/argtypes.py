"""argparse value types shared by the commands: a bad value is one line naming what was expected."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def _number(text: str, kind: type[int] | type[float]) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected {'a whole number' if kind is int else 'a number'}, got {text!r}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_int(text: str) -> int:
    value = int(_number(text, int))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1, got {value}")
    return value


def nonneg_int(text: str) -> int:
    value = int(_number(text, int))
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be ≥ 0, got {value}")
    return value


def positive_float(text: str) -> float:
    value = float(_number(text, float))
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def nonneg_float(text: str) -> float:
    value = float(_number(text, float))
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be ≥ 0, got {text}")
    return value


def bounded_int(low: int, high: int, why: str = "") -> Callable[[str], int]:
    """A whole number within [low, high] (``why`` says where the upper bound comes from)."""

    def parse(text: str) -> int:
        value = int(_number(text, int))
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be within [{low}, {high}]{why}, got {value}")
        return value

    parse.__name__ = f"int within [{low}, {high}]"
    return parse
