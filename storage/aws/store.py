"""DynamoDB + S3 backend. Clients come from boto3's standard configuration: credentials,
region and endpoints (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL_S3`).
Every part takes the one `Tables` (clients, names, clock, policies)."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config

from storage.aws.blobs import Blobs
from storage.aws.commits import Commits
from storage.aws.errors import unavailable
from storage.aws.feedback import Feedback
from storage.aws.history import History
from storage.aws.installations import Installations
from storage.aws.keeps import Keeps
from storage.aws.ledger import Ledger
from storage.aws.migrate import Migrated, migrate
from storage.aws.people import People
from storage.aws.queries import ListingQueries
from storage.aws.records import Records, Replicas
from storage.aws.summaries import Summaries
from storage.aws.tables import Tables
from storage.base import Store
from storage.errors import Translating
from storage.models import ConversationKey

CLIENT_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 5},
    max_pool_connections=64,  # many threads serve many conversations at once
    # Our requests are built by our own code, the same shapes every time (the contract
    # tests send each one): botocore need not check every parameter against the service
    # model again on each request. A malformed one is still refused, by the service.
    parameter_validation=False,
)


class AwsStore(Store):
    queries: ListingQueries
    translating = Translating(unavailable)

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
            policies=self,
        )
        self.dynamodb = self.tables.dynamodb
        self.s3 = self.tables.s3
        self.blobs = Blobs(self.tables)
        self.records = Records(self.tables)
        self.keeps = Keeps(self.tables, self.records)
        self.history = History(self.tables, self.get_blob, self._generation)
        self.summaries = Summaries(self.tables)
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

    def migrate(self) -> Migrated:
        """Bring a table written by the first release up to this layout (see `migrate`)."""
        with self.translating:
            return migrate(self.tables)

    def _generation(self, key: ConversationKey) -> int:
        record = self.records.get(key)
        return record.generation if record else 0


__all__ = ["AwsStore"]
