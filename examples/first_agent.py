"""The smallest agent of one's own (README, docs/agents.md): a read-only lookup and an email
a person approves. `BOT_AGENT=examples.first_agent:build_agent BOT_MODEL=offline ./dev bot`
runs it without a key; with OPENAI_API_KEY set, leave BOT_MODEL out."""

from agents import Agent, function_tool

from bot.agent_api import retry_safe


@function_tool
def lookup(topic: str) -> str:
    """Look a topic up (read-only)."""
    return f"Notes on {topic}: ask Dana, she knows."


@function_tool(needs_approval=True)
def send_email(to: str, body: str) -> str:
    """Send an email (a side effect: a person approves it first)."""
    return f"Sent to {to}: {body}"


def build_agent() -> Agent:
    return Agent(name="assistant", instructions="Be brief.", tools=[retry_safe(lookup), send_email])
