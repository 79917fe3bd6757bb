"""Which workspace a request comes from, as conversation keys and links name it.

With many workspaces a key names the request's Enterprise Grid organisation too (channel
ids are the organisation's). With one workspace it never does: keys stay exactly as they
were, so the conversations kept before go on."""

from __future__ import annotations

import re

from slack_bolt.async_app import AsyncBoltContext

SLACK_ID = re.compile(r"[A-Z0-9]{2,32}")  # team, enterprise, channel and user ids


def conversation_enterprise(context: AsyncBoltContext, *, many_workspaces: bool) -> str | None:
    """The enterprise a conversation key names for this request (None: none)."""
    if not many_workspaces:
        return None
    enterprise = context.enterprise_id
    return enterprise if isinstance(enterprise, str) and SLACK_ID.fullmatch(enterprise) else None


def workspace_url(context: AsyncBoltContext, default: str) -> str:
    """The request's workspace URL (from its authorization's auth.test), for thread links."""
    result = context.authorize_result
    url = result.url if result is not None else None
    return url if isinstance(url, str) and url.startswith("https://") else default
