"""The chaos soak: the real bot processes, the Slack stand-in, a scripted model server and the
storage emulators, under a randomized workload and injected faults; invariants checked after
each run. `python -m bench.chaos --help` (or `./dev chaos`)."""
