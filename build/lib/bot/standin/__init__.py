"""A local stand-in for Slack: its Web API (recording every call) for tests and local mode."""
