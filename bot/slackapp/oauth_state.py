"""The OAuth flow's `state` (bolt's CSRF check), signed instead of stored: anyone may open
the install page, so issuing a state writes nothing; only the redirect back from Slack,
which carries the state, writes (one small row, to make the state single-use).

A state is `<expiry>.<nonce>.<mac>`: its expiry (epoch seconds), a random nonce, and an
HMAC-SHA256 over both with a key derived from the app's client secret under a label of its
own (no new setting; a state's MAC is nothing else's MAC). Every replica verifies every
replica's states. bolt's browser check (the state cookie must match) is unchanged."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
from datetime import timedelta
from typing import Any

from slack_sdk.oauth.state_store.async_state_store import AsyncOAuthStateStore

from storage import StorageError, Store
from storage.calls import StorageCalls
from storage.installations import INSTALL_ID_LIMIT

log = logging.getLogger(__name__)
LABEL = b"durable-slack-agent: oauth state v1"
SPENT = "spent:"  # the one-time state that records a nonce as used


def state_key(client_secret: str) -> bytes:
    """The key that signs states, for them alone (domain separation by `LABEL`)."""
    return hmac.new(client_secret.encode(), LABEL, hashlib.sha256).digest()


class SignedStates(AsyncOAuthStateStore):
    """States valid for `expiration_seconds` (bolt's cookie lives as long), each consumed
    once: consuming one records its nonce as spent, through the store's one-time states (a
    first-wins write that expires with the state), so that a replayed redirect is refused,
    on any replica. Time is the store's clock."""

    def __init__(
        self,
        client_secret: str,
        store: Store,
        calls: StorageCalls | None = None,
        *,
        expiration_seconds: int = 600,
    ) -> None:
        self.key = state_key(client_secret)
        self.store = store
        self.calls = calls or StorageCalls(store)
        self.expiration_seconds = expiration_seconds

    @property
    def logger(self) -> logging.Logger:
        return log

    async def async_issue(self, *args: Any, **kwargs: Any) -> str:
        expiry = int(self._now()) + self.expiration_seconds
        signed = f"{expiry}.{secrets.token_urlsafe(16)}"
        return f"{signed}.{self._mac(signed)}"

    async def async_consume(self, state: str) -> bool:
        opened = self._opened(state)
        if opened is None:
            log.warning("refused an OAuth state this app did not issue")
            return False
        expiry, nonce = opened
        left = expiry - self._now()
        if left < 0:
            log.info("refused an expired OAuth state")
            return False
        try:
            first = await self.calls(
                self.store.issue_state, SPENT + nonce, timedelta(seconds=left + 1)
            )
        except StorageError as exc:  # the install fails plainly; the person tries again
            log.error("could not check an OAuth state: %r", exc)
            return False
        if not first:
            log.warning("refused an OAuth state used before (a replayed redirect)")
        return first

    def _opened(self, state: str) -> tuple[int, str] | None:
        """(expiry, nonce) of a state this app signed, else None."""
        if not state or len(state) > INSTALL_ID_LIMIT or not state.isascii():
            return None
        signed, _, mac = state.rpartition(".")
        expiry, _, nonce = signed.partition(".")
        if not (expiry.isascii() and expiry.isdigit() and nonce):
            return None
        if not hmac.compare_digest(mac.encode(), self._mac(signed).encode()):
            return None
        return int(expiry), nonce

    def _mac(self, signed: str) -> str:
        digest = hmac.new(self.key, signed.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def _now(self) -> float:
        return self.store.clock().timestamp()
