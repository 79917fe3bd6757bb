"""`python -m bot [serve | admin ...]`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from storage import StorageSettings, Store, open_store
from storage.durations import parse_duration
from storage.models import Status


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        settings = StorageSettings()
    except ValidationError as exc:
        for error in exc.errors():
            print(f"configuration error: {error['msg']}", file=sys.stderr)
        return 2
    handler = args.handler if hasattr(args, "handler") else _run_local
    result: int = handler(settings, args)
    return result


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bot", description=__doc__)
    commands = parser.add_subparsers(title="commands")
    serve = commands.add_parser("serve", help="serve Slack (Socket Mode or HTTP)")
    serve.set_defaults(handler=_serve)
    admin = commands.add_parser("admin", help="operator commands")
    admin_commands = admin.add_subparsers(title="admin commands", required=True)
    init = admin_commands.add_parser(
        "init-storage", help="create the DynamoDB table and S3 bucket (development, tests)"
    )
    init.set_defaults(handler=_init_storage)
    status = admin_commands.add_parser("status", help="conversations by status")
    status.set_defaults(handler=_status)
    listing = admin_commands.add_parser("list", help="conversations in one status")
    listing.add_argument("--status", default=Status.AWAITING_APPROVAL.value, choices=list(Status))
    listing.add_argument("--idle-for", default="0s", help="only idle this long (e.g. 12h, 7d)")
    listing.add_argument("--limit", type=int, default=50)
    listing.set_defaults(handler=_list)
    gc = admin_commands.add_parser("gc", help="local backend: drop expired rows, orphan blobs")
    gc.set_defaults(handler=_gc)
    return parser


def _describe(settings: StorageSettings) -> str:
    if settings.backend == "aws":
        return f"aws (table {settings.table}, bucket {settings.bucket})"
    return f"local ({settings.data_dir.resolve()})"


def _run_local(settings: StorageSettings, args: argparse.Namespace) -> int:
    store = open_store(settings)
    counts = store.count_by_status()
    print(f"storage: {_describe(settings)}; conversations: {_format_counts(counts)}")
    missing = [name for name in ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET") if not os.getenv(name)]
    if missing:
        print(
            "local mode: storage is ready. Not built yet: the conversation runtime, the Slack "
            f"layer and the local Slack stand-in. Missing for Slack: {', '.join(missing)}."
        )
        return 0
    return _serve(settings, args)


def _serve(settings: StorageSettings, args: argparse.Namespace) -> int:
    print("serve: the Slack layer is not built yet", file=sys.stderr)
    return 2


def _init_storage(settings: StorageSettings, args: argparse.Namespace) -> int:
    if settings.backend != "aws":
        open_store(settings).close()
        print(f"local storage ready in {settings.data_dir.resolve()}")
        return 0
    from storage.aws import create_resources

    assert settings.table and settings.bucket
    created = create_resources(settings.table, settings.bucket)
    print("created: " + (", ".join(created) if created else "nothing (all present)"))
    return 0


def _status(settings: StorageSettings, args: argparse.Namespace) -> int:
    store = open_store(settings)
    print(f"storage: {_describe(settings)}")
    print(_format_counts(store.count_by_status()))
    _print_oldest(store)
    return 0


def _print_oldest(store: Store) -> None:
    for status in (Status.AWAITING_APPROVAL, Status.INTERRUPTED):
        oldest = store.list_by_status(status, limit=1)
        if oldest:
            print(f"oldest {status}: {oldest[0].key} since {oldest[0].last_activity_at:%F %T}Z")


def _list(settings: StorageSettings, args: argparse.Namespace) -> int:
    store = open_store(settings)
    idle = parse_duration(args.idle_for) if args.idle_for not in ("0", "0s") else None
    for record in store.list_by_status(Status(args.status), idle_for=idle, limit=args.limit):
        version = record.checkpoint_version
        print(f"{record.key}\t{record.status}\tv{version}\t{record.last_activity_at:%F %T}Z")
    return 0


def _gc(settings: StorageSettings, args: argparse.Namespace) -> int:
    from storage.local import LocalStore

    store = open_store(settings)
    if not isinstance(store, LocalStore):
        print("gc is for the local backend; on AWS, TTL and S3 lifecycle rules clean up")
        return 0
    print(f"removed {store.collect_garbage()} orphan checkpoint blobs")
    return 0


def _format_counts(counts: dict[Status, int]) -> str:
    return ", ".join(f"{status} {count}" for status, count in counts.items())
