"""S3 objects: write-once puts (`If-None-Match: *`), reads, deletes."""

from __future__ import annotations

from botocore.exceptions import ClientError

from storage.aws.errors import code
from storage.aws.tables import Tables
from storage.errors import BlobExists, CheckpointMissing


class Blobs:
    def __init__(self, tables: Tables) -> None:
        self.t = tables

    def put_new(self, object_key: str, data: bytes) -> None:
        try:
            self.t.s3.put_object(Bucket=self.t.bucket, Key=object_key, Body=data, IfNoneMatch="*")
        except ClientError as exc:
            if code(exc) in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise BlobExists(object_key) from exc
            raise

    def refresh(self, object_key: str, data: bytes) -> None:
        """Unconditional: for content-addressed objects, whose name fixes their bytes; a
        write over the same bytes restarts the object's lifecycle clock."""
        self.t.s3.put_object(Bucket=self.t.bucket, Key=object_key, Body=data)

    def get(self, object_key: str) -> bytes:
        try:
            return self.t.s3.get_object(Bucket=self.t.bucket, Key=object_key)["Body"].read()
        except ClientError as exc:
            if code(exc) in ("NoSuchKey", "404"):
                raise CheckpointMissing(object_key, "no such object") from exc
            raise

    def delete(self, object_key: str) -> None:
        self.t.s3.delete_object(Bucket=self.t.bucket, Key=object_key)
