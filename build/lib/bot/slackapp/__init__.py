"""The Slack layer: slack-bolt's AsyncApp on top of the conversation runtime."""
