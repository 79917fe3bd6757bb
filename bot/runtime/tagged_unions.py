"""The OpenAI client's tagged unions, validated by the member a value names.

The client turns every event of a streamed response (and every output item of a response)
into its model by validating the data against the whole union of what it may be: 53 kinds
of streamed event. Pydantic then tries the union's members one by one to find the one that
fits: 50-120 µs per event here, more than all the rest of an event's handling, paid on the
event loop for every word the model streams. Yet each member is a model whose `type` field
is a one-value `Literal`, so the data names its member; validated against that member
alone, the same object comes out in a tenth of the time. (The same generated code, the same
cost, upstream: anthropics/anthropic-sdk-python#1649, #1695.)

`install()` wraps the one function every union validation of the client goes through
(`openai._models._validate_non_model_type`). Only a dict whose `type` names a member of a
union made of such models takes the short way, and a member that refuses it sends it the
old way; so does every other type and value. Where the client no longer has that function,
nothing is changed."""

from __future__ import annotations

import contextlib
import inspect
import logging
import types
from collections.abc import Callable, Iterator
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

log = logging.getLogger(__name__)
TAG = "type"
CLIENT_VALIDATE = "_validate_non_model_type"  # in `openai._models`
Validate = Callable[..., Any]
_members: dict[object, dict[str, type[BaseModel]] | None] = {}


def members_by_tag(union: object) -> dict[str, type[BaseModel]] | None:
    """Each member of a union of models by the one value its `type` field may take; None
    when the union is not made only of such models with distinct tags."""
    if get_origin(union) not in (Union, types.UnionType):
        return None
    by_tag: dict[str, type[BaseModel]] = {}
    for member in get_args(union):
        if not (inspect.isclass(member) and issubclass(member, BaseModel)):
            return None
        field = member.model_fields.get(TAG)
        if field is None or field.alias not in (None, TAG):
            return None
        if get_origin(field.annotation) is not Literal:
            return None
        values = get_args(field.annotation)
        if len(values) != 1 or not isinstance(values[0], str) or values[0] in by_tag:
            return None
        by_tag[values[0]] = member
    return by_tag


def named_member(union: object, value: object) -> type[BaseModel] | None:
    """The member of `union` that `value` names by its tag, if `union` is tagged."""
    if not isinstance(value, dict):
        return None
    try:
        by_tag = _members[union]
    except KeyError:
        by_tag = _members[union] = members_by_tag(union)
    except TypeError:  # an unhashable type: never a union of models
        return None
    if by_tag is None:
        return None
    tag = value.get(TAG)
    return by_tag.get(tag) if isinstance(tag, str) else None


def by_named_member(validate: Validate) -> Validate:
    """`validate` (the client's), going straight to the member a tagged value names."""

    def validate_union(*, type_: Any, value: object) -> Any:
        member = named_member(type_, value)
        if member is not None:
            try:
                return member.model_validate(value)
            except ValueError:  # not what its tag says: as the client would, whole
                pass
        return validate(type_=type_, value=value)

    validate_union.wrapped = validate  # type: ignore[attr-defined]
    return validate_union


def unwrapped(validate: Validate) -> Validate:
    """The client's own validation behind `validate` (itself, if it is not ours)."""
    return getattr(validate, "wrapped", validate)


def client_validate() -> Validate | None:
    """The client's union validation as it stands now (ours once installed); None where
    the client has no such function."""
    try:
        import openai._models as client_models
    except ImportError:
        return None
    current = getattr(client_models, CLIENT_VALIDATE, None)
    return current if callable(current) else None


def install() -> bool:
    """Wrap the client's union validation (once); whether it is wrapped now."""
    current = client_validate()
    if current is None:
        log.info("the OpenAI client validates unions another way: left as it is")
        return False
    if unwrapped(current) is not current:
        return True
    import openai._models as client_models

    setattr(client_models, CLIENT_VALIDATE, by_named_member(current))
    return True


@contextlib.contextmanager
def validating_by_tag(on: bool = True) -> Iterator[None]:
    """Within the block, the client's unions validated by the member a value names (`on`)
    or the client's own way; after it, as before (for a measurement of either)."""
    before = client_validate()
    if before is None:
        yield
        return
    import openai._models as client_models

    own = unwrapped(before)
    ours = before if before is not own else by_named_member(own)
    setattr(client_models, CLIENT_VALIDATE, ours if on else own)
    try:
        yield
    finally:
        setattr(client_models, CLIENT_VALIDATE, before)


__all__ = [
    "CLIENT_VALIDATE",
    "by_named_member",
    "client_validate",
    "install",
    "members_by_tag",
    "named_member",
    "unwrapped",
    "validating_by_tag",
]
