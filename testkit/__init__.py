"""Test infrastructure shared by `tests/` and `bench/`: fault injection from outside the
application (a loopback proxy in front of the storage emulators)."""
