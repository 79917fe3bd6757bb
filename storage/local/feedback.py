"""The local backend's verdicts on answers, counted per conversation and in all."""

from __future__ import annotations

from storage.local.database import Database
from storage.models import (
    ConversationKey,
    FeedbackTally,
    Verdict,
)


class Feedback:
    def __init__(self, database: Database) -> None:
        self.d = database

    def record(
        self, key: ConversationKey, answer: str, user: str, verdict: Verdict
    ) -> FeedbackTally | None:
        with self.d.write() as db:
            record = self.d.live(db, key, self.d.clock())
            if record is None:
                return None
            row = db.execute(
                "SELECT verdict FROM votes WHERE key = ? AND answer = ? AND user = ?",
                (str(key), answer, user),
            ).fetchone()
            before = Verdict(row[0]) if row else None
            if before is verdict:
                return record.feedback
            db.execute(
                "INSERT OR REPLACE INTO votes (key, answer, user, verdict) VALUES (?, ?, ?, ?)",
                (str(key), answer, user, verdict.value),
            )
            changes = {verdict: 1, **({before: -1} if before else {})}
            for side, change in changes.items():
                db.execute(
                    "INSERT INTO feedback_totals (verdict, count) VALUES (?, ?) ON CONFLICT"
                    "(verdict) DO UPDATE SET count = count + excluded.count",
                    (side.value, change),
                )
            tally = record.feedback.model_copy(
                update={
                    side.value: getattr(record.feedback, side.value) + change
                    for side, change in changes.items()
                }
            )
            self.d.save(db, record.model_copy(update={"feedback": tally}))
        return tally

    def count(self) -> FeedbackTally:
        rows = dict(self.d.connection().execute("SELECT verdict, count FROM feedback_totals"))
        return FeedbackTally(good=max(rows.get("good", 0), 0), bad=max(rows.get("bad", 0), 0))
