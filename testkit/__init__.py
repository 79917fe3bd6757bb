"""Test infrastructure that tests and benchmarks share: local services, the Slack and
model stand-ins, runtime helpers, child-process programs, the fault proxy."""
