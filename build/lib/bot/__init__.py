"""The Slack bot: conversation runtime, Slack layer, configuration and CLI."""
