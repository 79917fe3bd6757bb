"""Test infrastructure shared by `tests/` and `bench/`."""
