"""Operator commands, shared by the Slack `/agent-admin` command and `python -m bot admin`
(`bot.admin_usage` names them)."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from bot.admin_usage import COMMANDS, USAGE
from bot.permalink import PermalinkError, parse_permalink
from bot.runtime import PAUSED, ConversationRuntime, Discarded, Refused, StaleFilter, status_name
from storage import Conversation, ConversationKey, FeedbackTally, Status
from storage.config import format_duration, parse_duration

MAX_AGE = timedelta(days=3650)


class AdminError(ValueError):
    pass


@dataclass(frozen=True)
class AdminReply:
    text: str
    ok: bool = True


def parse_age(text: str) -> timedelta:
    """Like a duration, but `0` (or `0s`) is allowed: every matching conversation."""
    if text.strip() in ("0", "0s"):
        return timedelta(0)
    too_long = f"{text[:40]!r} is too long; at most {format_duration(MAX_AGE)}"
    try:
        age = parse_duration(text)
    except OverflowError as exc:
        raise argparse.ArgumentTypeError(too_long) from exc
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    if age > MAX_AGE:
        raise argparse.ArgumentTypeError(too_long)
    return age


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise AdminError(f"{message}\n{USAGE}")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="admin", add_help=False)
    commands = parser.add_subparsers(dest="command", required=True)
    status = commands.add_parser("status", add_help=False)
    status.add_argument("target", nargs="?")
    commands.add_parser("help", add_help=False)
    listing = commands.add_parser("list", add_help=False)
    listing.add_argument("stale", nargs="?", choices=["stale"])
    listing.add_argument("--older-than", type=parse_age, default=None)
    discard = commands.add_parser("discard", add_help=False)
    discard.add_argument("target")
    discard.add_argument("--older-than", type=parse_age, default=None)
    discard.add_argument("--dry-run", action="store_true")
    return parser


class AdminCommands:
    def __init__(
        self, runtime: ConversationRuntime, link: Callable[[ConversationKey], str]
    ) -> None:
        self.runtime = runtime
        self.link = link

    async def run(
        self, text: str, *, team: str, by: str | None, enterprise: str | None = None
    ) -> AdminReply:
        """`by`: the Slack user running the command; None for an operator at the console.
        Thread links name a conversation of `team` (in `enterprise`, if any)."""
        try:
            words = shlex.split(text or "help")
        except ValueError as exc:
            return AdminReply(f"Could not read that: {exc}.\n{USAGE}", ok=False)
        if words and words[0] not in COMMANDS:
            return AdminReply(
                f"Unknown command `{words[0][:40]}`. The commands are:\n{USAGE}", ok=False
            )
        try:
            args = _parser().parse_args(words)
        except (AdminError, ValueError) as exc:
            return AdminReply(str(exc), ok=False)
        if args.command == "help":
            return AdminReply(USAGE)
        try:
            if args.command == "status":
                if args.target:
                    return AdminReply(await self.one(_target(args.target, team, enterprise)))
                return AdminReply(await self.status())
            if args.command == "list":
                return AdminReply(
                    await self.listing(stale=bool(args.stale), older_than=args.older_than)
                )
            if args.target == "stale":
                if args.older_than is None:
                    return AdminReply(
                        "discard stale needs --older-than <duration>, e.g. 7d", ok=False
                    )
                return AdminReply(
                    await self.discard_stale(args.older_than, dry_run=args.dry_run, by=by)
                )
            target = _target(args.target, team, enterprise)
            return AdminReply(await self.discard(target, by=by))
        except PermalinkError as exc:
            return AdminReply(str(exc), ok=False)

    async def status(self) -> str:
        counts = await self.runtime.queries.counts()
        lines = ["*Conversations by status*"]
        lines += [f"• {status_name(status)}: {count}" for status, count in counts.items()]
        for status in (Status.AWAITING_APPROVAL, Status.INTERRUPTED):
            oldest = await self.runtime.queries.oldest(status)
            if oldest:
                lines.append(f"Oldest {status_name(status)}: {self._line(oldest)}")
        lines.append(_feedback_line(await self.runtime.queries.feedback_totals()))
        return "\n".join(lines)

    async def one(self, key: ConversationKey) -> str:
        record = await self.runtime.queries.conversation(key)
        if record is None:
            return "There is no conversation in that thread."
        lines = [self._line(record), _feedback_line(record.feedback)]
        if record.delivery_error:
            lines.append(f"Last delivery problem: {record.delivery_error}")
        if record.delivery_retry_at:
            lines.append(f"Next delivery attempt: {record.delivery_retry_at:%Y-%m-%d %H:%M:%S} UTC")
        return "\n".join(lines)

    async def listing(self, *, stale: bool, older_than: timedelta | None) -> str:
        default = self.runtime.settings.stale_after if stale else timedelta(0)
        age = older_than if older_than is not None else default
        records = await self.runtime.queries.stale(age)
        title = f"idle longer than {format_duration(age)}" if age else "paused or set aside"
        if not records:
            return f"No conversations {title}."
        return "\n".join([f"*Conversations {title}*", *(self._line(r) for r in records)])

    async def discard(
        self, key: ConversationKey, *, by: str | None, only_if: StaleFilter | None = None
    ) -> str:
        outcomes = await self.runtime.discard(key, by=by, only_if=only_if)
        for outcome in outcomes:
            if isinstance(outcome, Refused):
                return outcome.text
            if isinstance(outcome, Discarded):
                return _summary(outcome, self.link(key))
        return ""

    async def discard_stale(self, older_than: timedelta, *, dry_run: bool, by: str | None) -> str:
        records = await self.runtime.queries.stale(older_than)
        if dry_run:
            if not records:
                return f"Dry run: nothing idle longer than {format_duration(older_than)}."
            lines = [f"Dry run: would discard {len(records)}:"]
            return "\n".join(lines + [self._line(r) for r in records])
        # Each is checked again once its lease is taken: one that became active meanwhile
        # (or is being served right now) is left alone.
        only_if = StaleFilter(statuses=PAUSED, older_than=older_than)
        results = [await self.discard(r.key, by=by, only_if=only_if) for r in records]
        done = [result for result in results if result]
        skipped = len(results) - len(done)
        note = f"\n{skipped} became active meanwhile and were left alone." if skipped else ""
        if not done:
            return f"Nothing idle longer than {format_duration(older_than)}.{note}"
        return "\n".join([f"Discarded {len(done)}:", *done]) + note

    def _line(self, record: Conversation) -> str:
        return (
            f"• <{self.link(record.key)}|{record.key}> · {status_name(record.status)}"
            f" · last activity {record.last_activity_at:%Y-%m-%d %H:%M} UTC"
        )


def _target(text: str, team: str, enterprise: str | None = None) -> ConversationKey:
    """A thread link, or (for operators) a conversation key, with its enterprise or not."""
    if text.count(":") in (2, 3) and "/" not in text:
        try:
            return ConversationKey.parse(text)
        except ValueError:  # pydantic's own words are not for people
            raise PermalinkError() from None
    return parse_permalink(text, team, enterprise)


def _summary(result: Discarded, link: str) -> str:
    def names(calls: list[object]) -> str:
        return ", ".join(f"`{getattr(c, 'tool_name', '')}`" for c in calls) or "none"

    checkpoint = "its checkpoint" if result.removed_checkpoint else "no checkpoint"
    ran = f"; already done: {names(list(result.ran_calls))}" if result.ran_calls else ""
    unknown = (
        f"; outcome unknown: {names(list(result.unknown_calls))}" if result.unknown_calls else ""
    )
    return (
        f"• <{link}|{result.key}>: removed {checkpoint}; pending calls dropped: "
        f"{names(list(result.pending_calls))}{ran}{unknown}; queued messages dropped: "
        f"{result.dropped_messages} (was {status_name(result.previous_status)})"
    )


def _feedback_line(tally: FeedbackTally) -> str:
    return f"Feedback on answers: {tally.good} :thumbsup: · {tally.bad} :thumbsdown:"
