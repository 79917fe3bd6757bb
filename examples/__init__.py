"""Example agents for this bot, each a `build_agent()` to name in `BOT_AGENT` (docs/agents.md):

- `examples.support_desk`: a handoff to a billing agent whose refund needs approval, a
  retry-safe lookup, an agent used as a tool, an input guardrail, dynamic instructions
  reading the request's context.
- `examples.keyed_payments`: a keyed (`idempotent`) charge against a payment service that
  deduplicates by idempotency key (`PAYMENTS_URL`, or an offline stand-in).

Try one in local mode: `BOT_AGENT=examples.support_desk:build_agent ./dev bot`. Without
OPENAI_API_KEY each runs on a small offline model (`examples.offline`) that understands a
few sentences and says which; with it, on OpenAI's model.

They run from a checkout (the repository root is on the path of `./dev bot` and of
`python -m bot` started there); the wheel and the container image ship `bot` and `storage`
only, and an operator's own agent module goes beside them (docs/agents.md, "Shipping")."""
