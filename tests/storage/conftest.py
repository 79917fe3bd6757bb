"""What the storage tests share besides tests/conftest.py's `backend` and `store`."""

from __future__ import annotations

from storage import ConversationKey

# One thread is enough: every test gets a fresh backend (a new directory, table and bucket).
KEY = ConversationKey(team="T1", channel="C1", thread_ts="1700000000.000100")
