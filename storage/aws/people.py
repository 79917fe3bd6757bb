"""Person records (see `storage.people`) as items of the conversations' table (`layout`):
read consistently, changed, written back on the condition that the version read is still
the item's (or that there was none), again from a fresh read on a conflict. The item this
process last read or wrote for a person stands in for the first read: a person who asks
again (a new conversation notes their record) costs one write, not a read and a write, and
that write can go in a transaction the conversation writes anyway (`Commit.note`). Only a
write can confirm it: it must find the item at that version (a deleted item is not written
back), and a change that would write nothing is decided again from a fresh read."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from storage.aws.errors import code
from storage.aws.expressions import Item, n, s
from storage.aws.layout import epoch_seconds, person_key
from storage.aws.tables import Tables
from storage.errors import StorageUnavailable
from storage.people import CHANGE_ATTEMPTS, PERSON_TTL, Change, Person, PersonKey, blank, changed

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

KNOWN_LIMIT = 10_000  # people whose last item a process keeps


@dataclass(frozen=True)
class Written:
    """A person's item as a transaction writes it (`change_in_transaction`)."""

    name: str
    item: Item
    action: TransactWriteItemTypeDef


class People:
    def __init__(self, tables: Tables) -> None:
        self.t = tables
        self.known: dict[str, Item] = {}  # str(PersonKey) -> the item last read or written
        self.known_lock = threading.Lock()  # the storage threads share it

    def get(self, key: PersonKey) -> Person | None:
        item = self._read(key)
        if item is None or self._forgotten(item):
            return None
        self._remember(str(key), item)
        return Person.from_document(key, item["doc"]["S"], int(item["version"]["N"]))

    def change(self, key: PersonKey, change: Change) -> Person | None:
        name = str(key)
        for _ in range(CHANGE_ATTEMPTS + (name in self.known)):  # the copy's try is extra
            now = self.t.clock()
            with self.known_lock:
                known = self.known.pop(name, None)
            if known is not None and self._forgotten(known):
                known = None
            item = known if known is not None else self._read(key)
            version = int(item["version"]["N"]) if item else 0
            if item is None or self._forgotten(item):  # forgotten: starts afresh
                person = blank(key, now).model_copy(update={"version": version})
            else:
                person = Person.from_document(key, item["doc"]["S"], version)
            new = changed(person, change, now)
            if new is None:
                if known is not None:
                    continue  # nothing to write by a copy: decided again from a fresh read
                self._remember(name, item)
                return None
            written = self._item(name, new, now)
            try:
                self.t.dynamodb.put_item(
                    TableName=self.t.table,
                    Item=written,
                    ConditionExpression="version = :read"
                    if known is not None
                    else "attribute_not_exists(pk) OR version = :read",
                    ExpressionAttributeValues={":read": n(version)},
                )
            except ClientError as exc:
                if code(exc) != "ConditionalCheckFailedException":
                    raise
                if known is None:
                    time.sleep(random.uniform(0.005, 0.05))  # someone wrote meanwhile: again
                continue
            self._remember(name, written)
            return new
        raise StorageUnavailable(f"{key}: the person's record kept changing under the write")

    def change_in_transaction(self, key: PersonKey, change: Change) -> Written | None:
        """The change as a transaction's action, from the item this process last read or
        wrote for the person, on the condition that it is still theirs; None when there is
        no such item, or the change would write nothing by it (then `change` decides from a
        fresh read). The caller `remember`s what it wrote, or `forget`s a copy found
        stale."""
        name = str(key)
        with self.known_lock:
            known = self.known.get(name)
        if known is None or self._forgotten(known):
            return None
        now = self.t.clock()
        version = int(known["version"]["N"])
        new = changed(Person.from_document(key, known["doc"]["S"], version), change, now)
        if new is None:
            return None
        item = self._item(name, new, now)
        action: TransactWriteItemTypeDef = {
            "Put": {
                "TableName": self.t.table,
                "Item": item,
                "ConditionExpression": "version = :read",
                "ExpressionAttributeValues": {":read": n(version)},
            }
        }
        return Written(name, item, action)

    def remember(self, written: Written) -> None:
        self._remember(written.name, written.item)

    def forget(self, key: PersonKey) -> None:
        with self.known_lock:
            self.known.pop(str(key), None)

    def _item(self, name: str, person: Person, now: datetime) -> Item:
        return person_key(name) | {
            "doc": s(person.document()),
            "version": n(person.version),
            "expires_at": n(epoch_seconds(now + PERSON_TTL)),
        }

    def _remember(self, name: str, item: Item | None) -> None:
        if item is None:
            return
        with self.known_lock:
            if len(self.known) >= KNOWN_LIMIT:
                self.known.pop(next(iter(self.known)))  # the oldest
            self.known[name] = item

    def _read(self, key: PersonKey) -> Item | None:
        found = self.t.dynamodb.get_item(
            TableName=self.t.table, Key=person_key(str(key)), ConsistentRead=True
        )
        item: Item | None = found.get("Item")
        return item

    def _forgotten(self, item: Item) -> bool:
        """Past its TTL (which deletes late): absent."""
        return int(item["expires_at"]["N"]) < epoch_seconds(self.t.clock())
