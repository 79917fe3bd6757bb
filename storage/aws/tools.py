"""Tool-call ledger rows: one per call id, `approved` (by the commit that lets it run),
`started` (just before it runs), then `completed` with the output.

Fields are plain attributes, so completing a call is one conditional update (no read);
an output too big for the row lives in S3 (write-once) and the row points at it."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import datetime

from storage.aws.expressions import Item, Update, n, s
from storage.aws.layout import from_ms, ms, row, tool_sk
from storage.models import ConversationKey, ToolCallRecord, ToolCallStatus
from storage.writes import INLINE_ITEM_LIMIT

ARGUMENTS_INLINE_LIMIT = 100_000  # the row also holds the output; both stay under 400 KB


def started_row(
    record: ToolCallRecord,
    generation: int,
    expires: datetime,
    put_blob: Callable[[str, bytes], None],
) -> Item:
    body: Item = {
        "tool_name": s(record.tool_name),
        "status": s(record.status.value),
        "fence": n(record.fence),
        "started_ms": n(ms(record.started_at)),
    }
    data = record.arguments.encode()
    if len(data) > ARGUMENTS_INLINE_LIMIT:
        blob_key = f"tools/{record.key.path}/{record.call_id}-args-{_digest(data)}.txt"
        put_blob(blob_key, data)
        body["arguments_blob"] = s(blob_key)
    else:
        body["arguments"] = s(record.arguments)
    return row(record.key, tool_sk(generation, record.call_id), body, expires)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def completion(
    key: ConversationKey,
    call_id: str,
    output: str,
    now: datetime,
    expires: datetime,
    put_blob: Callable[[str, bytes], None],
    status: ToolCallStatus = ToolCallStatus.COMPLETED,
) -> Update:
    """The update that completes a started call, or records that it never ran
    (`CANCELLED`) (condition: it is still `started`, or, cancelled, `approved`)."""
    update = Update()
    update.set("status", s(status.value))
    update.set("completed_ms", n(ms(now)))
    update.set("expires_at", n(int(expires.timestamp())))
    data = output.encode()
    if len(data) > INLINE_ITEM_LIMIT:
        blob_key = f"tools/{key.path}/{call_id}-output-{_digest(data)}.txt"
        put_blob(blob_key, data)
        update.set("output_blob", s(blob_key))
    else:
        update.set("output", s(output))
    started = f"{update.name('status')} = {update.value('started', s('started'))}"
    if status is ToolCallStatus.CANCELLED:
        approved = update.value("approved", s(ToolCallStatus.APPROVED.value))
        started = f"{started} OR {update.name('status')} = {approved}"
    update.require(started)
    return update


def record_from_row(
    key: ConversationKey, call_id: str, item: Item, get_blob: Callable[[str], bytes]
) -> ToolCallRecord:
    if "record" in item:  # rows written before the fields were split out
        return ToolCallRecord.model_validate_json(item["record"]["S"])
    if "record_blob" in item:
        return ToolCallRecord.model_validate_json(get_blob(item["record_blob"]["S"]))
    output = item["output"]["S"] if "output" in item else None
    if "output_blob" in item:
        output = get_blob(item["output_blob"]["S"]).decode()
    if "arguments_blob" in item:
        arguments = get_blob(item["arguments_blob"]["S"]).decode()
    else:
        arguments = item["arguments"]["S"]
    return ToolCallRecord(
        key=key,
        call_id=call_id,
        tool_name=item["tool_name"]["S"],
        arguments=arguments,
        status=ToolCallStatus(item["status"]["S"]),
        output=output,
        fence=int(item["fence"]["N"]),
        started_at=from_ms(item["started_ms"]["N"]),
        completed_at=from_ms(item["completed_ms"]["N"]) if "completed_ms" in item else None,
        attempts=int(item["attempts"]["N"]) if "attempts" in item else 1,
    )


def retry(fence: int, now: datetime, max_attempts: int) -> Update:
    """The update that starts a call again (condition: still `started`, attempts left)."""
    update = Update()
    update.set("fence", n(fence))
    update.set("started_ms", n(ms(now)))
    attempts = update.name("attempts")
    update.sets.append(f"{attempts} = if_not_exists({attempts}, :one_attempt) + :one_attempt")
    update.values[":one_attempt"] = n(1)
    update.require(f"{update.name('status')} = {update.value('started', s('started'))}")
    update.require(
        f"(attribute_not_exists({attempts}) AND :one_attempt < :max_attempts) OR "
        f"{attempts} < :max_attempts"
    )
    update.values[":max_attempts"] = n(max_attempts)
    return update
