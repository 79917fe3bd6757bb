"""DynamoDB + S3 backend. Clients come from boto3's standard configuration: credentials,
region and endpoints (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL_S3`).

The store only wires its parts and translates errors (`errors.translated`): the record and
its lease (`records`), keeping messages (`keeps`), reading them (`inbox`), records whose
state expired (`expired`), the atomic write (`commits`), session items (`history`), ledgers
(`ledger`), operational queries (`queries`), verdicts on answers (`feedback`), installation
documents and one-time states (`installations`), replicas' heartbeats (`replicas`), S3
(`blobs`); request pieces are built in `expressions`, keys laid out in `layout`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import boto3
from botocore.config import Config

from storage.aws.blobs import Blobs
from storage.aws.commits import Commits
from storage.aws.errors import translated
from storage.aws.expired import expired_record
from storage.aws.feedback import Feedback
from storage.aws.history import History
from storage.aws.inbox import read_inbox
from storage.aws.installations import Installations
from storage.aws.keeps import Keeps
from storage.aws.ledger import Ledger
from storage.aws.migrate import Migrated, migrate
from storage.aws.people import People
from storage.aws.queries import ListingQueries
from storage.aws.records import Records
from storage.aws.refusals import refusals_told
from storage.aws.replicas import Replicas
from storage.aws.summaries import read_summary
from storage.aws.tables import Tables
from storage.base import Store
from storage.installations import Removal
from storage.listings import INDEXED
from storage.models import (
    Conversation,
    ConversationKey,
    FeedbackTally,
    InboxEntry,
    Lease,
    Status,
    Summary,
    ToolCallClaim,
    ToolCallRecord,
    ToolCallStatus,
    Verdict,
)
from storage.people import Change, Person, PersonKey
from storage.writes import Commit, Committed, KeepResult, SessionPage

CLIENT_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 5},
    max_pool_connections=64,  # many threads serve many conversations at once
    # Our requests are built by our own code, the same shapes every time (the contract
    # tests send each one): botocore need not check every parameter against the service
    # model again on each request. A malformed one is still refused, by the service.
    parameter_validation=False,
)


class AwsStore(Store):
    def __init__(self, table: str, bucket: str, **options: Any) -> None:
        super().__init__(**options)
        self.table = table
        self.bucket = bucket
        session = boto3.session.Session()
        self.tables = Tables(
            dynamodb=session.client("dynamodb", config=CLIENT_CONFIG),
            s3=session.client("s3", config=CLIENT_CONFIG),
            table=table,
            bucket=bucket,
            clock=lambda: self.clock(),
            state_ttl=self.state_ttl,
            tombstone_ttl=self.tombstone_ttl,
            backlog_limit=self.backlog_limit,
            event_ttl=self.event_ttl,
            claim_ttl=self.claim_ttl,
            lease_duration=self.lease_duration,
            lease_skew=self.lease_skew,
            shards=self.status_shards,
        )
        self.dynamodb = self.tables.dynamodb
        self.s3 = self.tables.s3
        self.blobs = Blobs(self.tables)
        self.records = Records(self.tables)
        self.keeps = Keeps(self.tables, self.records)
        self.history = History(self.tables, self.get_blob)
        self.people = People(self.tables)
        self.commits = Commits(self.tables, self.records.get, self.put_blob_once, self.people)
        self.ledger = Ledger(self.tables, self._generation, self.put_blob_once, self.get_blob)
        self.queries = ListingQueries(self.tables)
        self.feedback = Feedback(self.tables)
        self.installations = Installations(self.tables)
        self.replicas = Replicas(self.tables)

    def close(self) -> None:
        self.queries.close()
        self.dynamodb.close()
        self.s3.close()

    @translated
    def migrate(self) -> Migrated:
        """Bring a table written by the first release up to this layout (see `migrate`)."""
        return migrate(self.tables)

    def _generation(self, key: ConversationKey) -> int:
        record = self.records.get(key)
        return record.generation if record else 0

    # -- records and leases -------------------------------------------------------------

    @translated
    def get(self, key: ConversationKey) -> Conversation | None:
        return self.records.get(key)

    @translated
    def expired_record(self, key: ConversationKey) -> Conversation | None:
        return expired_record(self.tables, key)

    @translated
    def acquire(
        self,
        key: ConversationKey,
        owner: str,
        *,
        status: Status | None = None,
        force: bool = False,
        create: bool = True,
        takeover_from: str | None = None,
    ) -> tuple[Lease, Conversation]:
        return self.records.acquire(
            key, owner, status=status, force=force, create=create, takeover_from=takeover_from
        )

    @translated
    def renew(self, lease: Lease, *, working: bool = False) -> Lease:
        return self.records.renew(lease, working=working)

    @translated
    def stop_requested(self, key: ConversationKey) -> str | None:
        return self.records.stop_requested(key)

    # -- the atomic write ---------------------------------------------------------------

    @translated
    def apply(self, commit: Commit) -> Committed:
        return self.commits.apply(commit)

    # -- session ------------------------------------------------------------------------

    @translated
    def read_items(self, key: ConversationKey, limit: int | None = None) -> SessionPage:
        return self.history.read_items(key, limit)

    @translated
    def pop_item(self, key: ConversationKey, lease: Lease | None = None) -> str | None:
        return self.history.pop_item(key, lease)

    @translated
    def clear_items(self, key: ConversationKey, lease: Lease | None = None) -> None:
        generation = lease.generation if lease else self._generation(key)
        self.history.clear_items(key, lease, generation)

    @translated
    def read_summary(self, record: Conversation) -> Summary | None:
        return read_summary(self.tables, record)

    # -- inbox --------------------------------------------------------------------------

    @translated
    def keep(
        self,
        key: ConversationKey,
        event_id: str,
        payload: str,
        *,
        create: bool = True,
        participant: str | None = None,
        owner: str | None = None,
        token: str | None = None,
        stop_by: str | None = None,
        refusal_text: str = "",
        capped: bool = True,
    ) -> KeepResult:
        return self.keeps.keep(
            key,
            event_id,
            payload,
            create=create,
            participant=participant,
            owner=owner,
            token=token,
            stop_by=stop_by,
            refusal_text=refusal_text,
            capped=capped,
        )

    @translated
    def read_inbox(
        self, key: ConversationKey, generation: int | None = None, limit: int | None = None
    ) -> list[InboxEntry]:
        return read_inbox(self.tables, key, generation, limit)

    @translated
    def refusals_told(
        self, key: ConversationKey, event_ids: Sequence[str], counted: int = 0
    ) -> None:
        refusals_told(self.tables, key, event_ids, counted)

    # -- ledgers ------------------------------------------------------------------------

    @translated
    def claim_event(self, event_id: str) -> bool:
        return self.ledger.claim_event(event_id)

    @translated
    def begin_tool_call(
        self, lease: Lease, call_id: str, tool_name: str, arguments: str
    ) -> ToolCallClaim:
        return self.ledger.begin(lease, call_id, tool_name, arguments)

    @translated
    def complete_tool_call(
        self,
        lease: Lease,
        call_id: str,
        output: str,
        *,
        status: ToolCallStatus = ToolCallStatus.COMPLETED,
    ) -> bool:
        return self.ledger.complete(lease, call_id, output, status)

    @translated
    def retry_tool_call(
        self, lease: Lease, call_id: str, *, max_attempts: int
    ) -> ToolCallRecord | None:
        return self.ledger.retry(lease, call_id, max_attempts)

    @translated
    def get_tool_call(
        self, key: ConversationKey, call_id: str, generation: int | None = None
    ) -> ToolCallRecord | None:
        return self.ledger.get(key, call_id, generation)

    # -- operational queries ------------------------------------------------------------

    @translated
    def list_by_status(
        self, status: Status, *, idle_for: timedelta | None = None, limit: int = 100
    ) -> list[Conversation]:
        return self.queries.list_by_status(status, idle_for=idle_for, limit=limit)

    @translated
    def count_by_status(self) -> dict[Status, int]:
        return self.queries.count_by_status()

    @translated
    def list_by_team(
        self,
        team: str | None,
        *,
        enterprise: str | None = None,
        statuses: Sequence[Status] = INDEXED,
        limit: int = 1000,
    ) -> list[Conversation]:
        return self.queries.list_by_team(team, enterprise, statuses, limit)

    @translated
    def list_paused_in(
        self,
        team: str,
        channel: str,
        *,
        enterprise: str | None = None,
        participant: str | None = None,
        limit: int = 50,
    ) -> list[Conversation]:
        return self.queries.list_paused_in(team, channel, enterprise, participant, limit)

    @translated
    def list_waiting_on(
        self, team: str, user: str, *, enterprise: str | None = None, limit: int = 20
    ) -> list[Conversation]:
        return self.queries.list_waiting_on(team, user, enterprise, limit)

    @translated
    def list_waiting_in(
        self, team: str, *, enterprise: str | None = None, limit: int = 50
    ) -> list[Conversation]:
        return self.queries.list_waiting_in(team, enterprise, limit)

    # -- people -------------------------------------------------------------------------

    @translated
    def get_person(self, key: PersonKey) -> Person | None:
        return self.people.get(key)

    @translated
    def _change_person(self, key: PersonKey, change: Change) -> Person | None:
        return self.people.change(key, change)

    # -- replicas -----------------------------------------------------------------------

    @translated
    def beat(self, replica: str) -> None:
        self.replicas.beat(replica)

    @translated
    def beats(self) -> dict[str, datetime]:
        return self.replicas.beats()

    # -- installations ------------------------------------------------------------------

    @translated
    def save_installation(self, install_id: str, document: str) -> None:
        self.installations.save(install_id, document)

    @translated
    def find_installation(self, install_id: str) -> str | None:
        return self.installations.find(install_id)

    @translated
    def delete_installation(self, install_id: str, *, only: str | None = None) -> bool:
        return self.installations.delete(install_id, only)

    @translated
    def issue_state(self, state: str, ttl: timedelta) -> bool:
        return self.installations.issue_state(state, ttl)

    @translated
    def consume_state(self, state: str) -> bool:
        return self.installations.consume_state(state)

    @translated
    def record_removal(self, removal: Removal) -> bool:
        return self.installations.record_removal(removal)

    @translated
    def find_removal(self, removal_id: str) -> Removal | None:
        return self.installations.find_removal(removal_id)

    @translated
    def pending_removals(self) -> list[Removal]:
        return self.installations.pending_removals()

    @translated
    def finish_removal(self, removal_id: str) -> None:
        self.installations.finish_removal(removal_id)

    # -- feedback -----------------------------------------------------------------------

    @translated
    def record_feedback(
        self, key: ConversationKey, answer: str, user: str, verdict: Verdict
    ) -> FeedbackTally | None:
        return self.feedback.record(key, answer, user, verdict)

    @translated
    def count_feedback(self) -> FeedbackTally:
        return self.feedback.count()

    # -- blobs --------------------------------------------------------------------------

    @translated
    def put_blob(self, object_key: str, data: bytes) -> None:
        self.blobs.put_new(object_key, data)

    @translated
    def refresh_blob(self, object_key: str, data: bytes) -> None:
        self.blobs.put(object_key, data)

    @translated
    def get_blob(self, object_key: str) -> bytes:
        return self.blobs.get(object_key)

    @translated
    def delete_blob(self, object_key: str) -> None:
        self.blobs.delete(object_key)


__all__ = ["AwsStore"]
