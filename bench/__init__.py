"""Benchmarks: they print figures; targets are read, never asserted as timed tests."""
