"""Tests of the benchmark engine."""
