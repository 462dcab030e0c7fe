"""ACP content blocks (tag: ``type``). Part of :mod:`acpfsm.adapters.acp.messages` (import them
from there)."""

from __future__ import annotations

from typing import Any, TypeAlias

from .messages_base import (
    _Wire,
)

# --------------------------------------------------------------------------------------------
# Content blocks (tag: ``type``)


class TextContent(_Wire, frozen=True, kw_only=True, tag_field="type", tag="text"):
    text: str
    annotations: Any = None


class ImageContent(_Wire, frozen=True, kw_only=True, tag_field="type", tag="image"):
    data: str
    mime_type: str
    uri: str | None = None
    annotations: Any = None


class AudioContent(_Wire, frozen=True, kw_only=True, tag_field="type", tag="audio"):
    data: str
    mime_type: str
    annotations: Any = None


class ResourceLink(_Wire, frozen=True, kw_only=True, tag_field="type", tag="resource_link"):
    uri: str
    name: str
    mime_type: str | None = None
    title: str | None = None
    description: str | None = None
    size: int | None = None
    annotations: Any = None


class ResourceContents(_Wire, frozen=True, kw_only=True):
    """Text (``text``) or binary (``blob``, base64) contents of an embedded resource."""

    uri: str
    mime_type: str | None = None
    text: str | None = None
    blob: str | None = None


class EmbeddedResource(_Wire, frozen=True, kw_only=True, tag_field="type", tag="resource"):
    resource: ResourceContents
    annotations: Any = None


ContentBlock: TypeAlias = (
    TextContent | ImageContent | AudioContent | ResourceLink | EmbeddedResource
)


def text_block(text: str) -> TextContent:
    return TextContent(text=text)
