"""The storage contract's part for conversation summaries: what a model wrote of a long
conversation's earlier items, kept beside the history (never in it) and given to the
model in their place. A summary is written by the checkpoint commit that first gives it to
the model (`Commit.summary`), in the same atomic write, and replaces the one before it; the
record names it (`Conversation.summary_seq`), so a conversation that has none costs no read."""

from __future__ import annotations

from abc import ABC, abstractmethod

from storage.models import Conversation, Summary


class ConversationSummaries(ABC):
    @abstractmethod
    def read_summary(self, record: Conversation) -> Summary | None:
        """The summary `record` names, or None: it names none, it stands for items that
        are gone (a cleared session), or it expired with the conversation's other rows."""
