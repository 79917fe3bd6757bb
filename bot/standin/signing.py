"""Sign a request body the way Slack does (v0 HMAC-SHA256 of `v0:{timestamp}:{body}`)."""

from __future__ import annotations

import hashlib
import hmac
import time


def signed_headers(body: str, secret: str, *, timestamp: int | None = None) -> dict[str, str]:
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), f"v0:{stamp}:{body}".encode(), hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}"}
