"""Every JSON-RPC message against the official ACP schema (JSON Schema 2020-12).

Where the schema comes from
---------------------------
The ACP project publishes its protocol as JSON Schema; the npm package
``@agentclientprotocol/sdk`` ships the stable schema of each protocol version as
``schema/v1/schema.json`` and ``schema/v2/schema.json``. acpfsm vendors those two files, as
published in the pinned version (:data:`SCHEMA_PACKAGE`, :data:`SCHEMA_PACKAGE_VERSION`), in
``acp_schema/`` beside this module, with the package's Apache-2.0 licence and a note of their
provenance (``acp_schema/README.md``). They are package data: ``acpfsm conform`` validates
offline, on any machine ``pip install acpfsm`` reached, and never downloads anything. The
digest of each file is pinned here (:data:`BUNDLED`) and checked when it is loaded; the test
suite fetches the pinned npm package (``npm pack``, into ``.cache/``) and checks the vendored
files are byte for byte the published ones. ``--schema FILE`` validates against another
schema file of the same layout (a newer SDK's), reported with its own digest.

How a message is validated
--------------------------
The schema's own routing tables say which definition each method uses: the ``AgentRequest``,
``AgentNotification`` and ``AgentResponse`` definitions (what an agent sends) and their
``Client*`` counterparts list, by ``$ref``, one definition per method, each naming its method
(``x-method``). A message is checked as the JSON-RPC envelope the top-level schema describes
(``jsonrpc: "2.0"``, a ``RequestId``, a request's ``method``, a response's ``result`` or
``error``) and its ``params`` (a request or notification) or ``result`` (a response, by the
method of the request it answers) against the method's definition, with ``jsonschema``'s
Draft 2020-12 validator over a ``referencing`` registry (one validator per definition, made on
first use and kept for the run). The top-level schema alone would accept any method with any
params (its extension branches are ``{}``); routing by method is what makes the check bite.
A method the schema does not define is an extension when its name starts with ``_`` (ACP's
extensibility rule: anything goes); otherwise it is reported, for it is no ACP method.

Each violation names the direction, the method, the JSON pointer (RFC 6901) of the offending
member inside the message, what the schema expects there and the value found, quoted safely
(:func:`quote`) and cut to a bound. For a ``oneOf``/``anyOf`` the branch is picked the way the
schema's ``discriminator`` says (the ``sessionUpdate`` of an update, the ``type`` of a content
block), so a broken text chunk is reported at ``/params/update/content/text``, not as "matches
none of eleven update kinds".
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from .quoting import quote, safe_text
from .report import ConformUsageError

__all__ = [
    "BUNDLED",
    "SCHEMA_PACKAGE",
    "SCHEMA_PACKAGE_VERSION",
    "SCHEMA_TARBALL_SHA256",
    "Direction",
    "MessageSchema",
    "Violation",
    "quote",
    "safe_text",
]

SCHEMA_PACKAGE = "@agentclientprotocol/sdk"
SCHEMA_PACKAGE_VERSION = "2.4.0"
SCHEMA_TARBALL_SHA256 = "87acc66d5824f88d8913702f85cf74c997526bbffb06fce15a9f0d637566ca8d"
"""Of ``agentclientprotocol-sdk-2.4.0.tgz`` as ``npm pack`` fetches it."""
#: The vendored schema of each protocol version: its path in the package (and in ``schema/``
#: of the npm package) and its SHA-256.
BUNDLED: Mapping[int, tuple[str, str]] = {
    1: ("v1/schema.json", "0d0b1ca83c4872e5473f68926a894c7a8203b59b118e2a79bfe43dd76fbcbc1a"),
    2: ("v2/schema.json", "b6c91055df549d6f1db1d76d692d0561dad433e03d8ed114ea9b5baed9da72c5"),
}
_URI = "urn:acpfsm:acp-schema"
_EXPECTED_CHARS = 240
#: The routing definitions: who sends them, and what they route.
_ROUTES = {
    ("agent", "request"): "AgentRequest",
    ("agent", "notification"): "AgentNotification",
    ("agent", "response"): "AgentResponse",
    ("client", "request"): "ClientRequest",
    ("client", "notification"): "ClientNotification",
    ("client", "response"): "ClientResponse",
}


class Direction(enum.StrEnum):
    AGENT_TO_CLIENT = "agent → client"
    CLIENT_TO_AGENT = "client → agent"

    @property
    def sender(self) -> str:
        return "agent" if self is Direction.AGENT_TO_CLIENT else "client"


@dataclass(frozen=True, slots=True)
class Violation:
    """One way a message breaks the schema."""

    direction: Direction
    method: str
    """The method of the message, or of the request a response answers ("" when unknown)."""
    kind: str
    """request, notification, result, error or message (not even a JSON-RPC shape)."""
    pointer: str
    """Where in the message (RFC 6901; "" is the whole message)."""
    expected: str
    value: str
    """What was there, quoted safely and bounded ("(absent)" for a missing member)."""

    @property
    def group(self) -> tuple[str, ...]:
        """What makes two violations the same finding (array indices aside)."""
        pointer = re.sub(r"/\d+(?=/|$)", "/*", self.pointer)
        return (self.direction.value, self.method, self.kind, pointer, self.expected)

    def describe(self) -> str:
        where = self.pointer or "(the message)"
        unknown = "(no method)" if self.kind in ("request", "notification") else "(no request)"
        method = self.method or unknown
        return (
            f"{method} {self.kind}, {self.direction.value}, at {where}: expected "
            f"{self.expected}; got {self.value}"
        )


def _pointer(path: Iterable[Any]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


# ---------------------------------------------------------------------------- the schema


@dataclass(frozen=True, slots=True)
class _Source:
    label: str
    sha256: str
    version: int | None


class MessageSchema:
    """One ACP schema, compiled once: :meth:`check` validates a whole JSON-RPC message."""

    def __init__(self, document: Any, *, label: str, sha256: str, version: int | None) -> None:
        if not isinstance(document, dict) or not isinstance(document.get("$defs"), dict):
            raise ConformUsageError(f"{label}: not a JSON Schema with $defs")
        self.document = document
        self.source = _Source(label, sha256, version)
        self.defs: dict[str, Any] = document["$defs"]
        missing = [d for d in (*_ROUTES.values(), "RequestId", "Error") if d not in self.defs]
        if missing:
            raise ConformUsageError(f"{label}: not ACP's layout (no {', '.join(missing)})")
        resource = Resource.from_contents(document, default_specification=DRAFT202012)
        self._registry: Registry[Any] = Registry().with_resource(_URI, resource)
        self._cls: Any = jsonschema.validators.validator_for(
            document, default=jsonschema.Draft202012Validator
        )
        self._validators: dict[str, Any] = {}
        self._names = {id(schema): name for name, schema in self.defs.items()}
        self.routes: dict[tuple[str, str], dict[str, str]] = {
            key: self._methods(self.defs[name]) for key, name in _ROUTES.items()
        }

    # -- loading
    @classmethod
    def bundled(cls, version: int) -> MessageSchema:
        """The vendored schema of protocol ``version`` (its digest checked)."""
        if version not in BUNDLED:
            raise ConformUsageError(
                f"no official schema of ACP protocol version {version} is bundled (only "
                f"{', '.join(f'v{v}' for v in BUNDLED)}): give --schema FILE"
            )
        relative, pinned = BUNDLED[version]
        data = resources.files(__package__).joinpath("acp_schema", relative).read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest != pinned:
            raise ConformUsageError(
                f"the bundled {relative} has SHA-256 {digest}, not the pinned {pinned}"
            )
        label = f"ACP v{version} schema of {SCHEMA_PACKAGE} {SCHEMA_PACKAGE_VERSION}"
        return cls(json.loads(data), label=label, sha256=digest, version=version)

    @classmethod
    def from_file(cls, path: str | Path) -> MessageSchema:
        """A schema file of ACP's layout (e.g. a newer SDK's ``schema/v1/schema.json``)."""
        try:
            data = Path(path).read_bytes()
            document = json.loads(data)
        except (OSError, ValueError, RecursionError) as exc:
            raise ConformUsageError(f"cannot read the schema {path}: {exc}") from exc
        digest = hashlib.sha256(data).hexdigest()
        return cls(document, label=f"the schema {path}", sha256=digest, version=None)

    def describe(self) -> str:
        return f"{self.source.label} (sha256 {self.source.sha256[:12]}…)"

    # -- routing
    def _methods(self, schema: Any) -> dict[str, str]:
        """Every ``$ref`` under ``schema`` to a definition naming its method: method → name."""
        out: dict[str, str] = {}
        for ref in _refs(schema):
            name = ref.rpartition("/")[2]
            method = self.defs.get(name, {}).get("x-method")
            if ref.startswith("#/$defs/") and isinstance(method, str):
                out.setdefault(method, name)
        return out

    def definition(self, sender: str, kind: str, method: str) -> str | None:
        """The definition of ``method``'s params (``kind`` request/notification) or result
        (``kind`` response) when ``sender`` sends it; None when the schema has none."""
        return self.routes[(sender, kind)].get(method)

    def _validator(self, name: str) -> Any:
        validator = self._validators.get(name)
        if validator is None:
            schema = {"$ref": f"{_URI}#/$defs/{name}"}
            validator = self._validators[name] = self._cls(schema, registry=self._registry)
        return validator

    def validate_definition(self, name: str, value: Any, at: Iterable[Any] = ()) -> list[Finding]:
        """``value`` against the definition ``name``: each finding with its pointer from
        ``at``."""
        base = list(at)
        found: list[Finding] = []
        for error in self._validator(name).iter_errors(value):
            found += _Explain(self, base).error(error)
        return _unique(found)

    # -- whole messages
    def check(
        self, direction: Direction, message: Any, answered: str | None = None
    ) -> list[Violation]:
        """Every violation of ``message`` (a decoded JSON value) sent in ``direction``.
        ``answered`` is the method of the request a response answers (None: unknown)."""
        sender = direction.sender

        def violation(kind: str, method: str, finding: Finding) -> Violation:
            pointer, expected, value = finding
            return Violation(direction, method, kind, pointer, expected, value)

        if not isinstance(message, dict):
            return [
                violation("message", "", ("", "a JSON-RPC message (an object)", quote(message)))
            ]
        method = message.get("method")
        if isinstance(method, str) or "method" in message:
            kind = "request" if "id" in message else "notification"
            name = _cut(method, 80) if isinstance(method, str) else ""
            return [violation(kind, name, f) for f in self._call(sender, kind, message)]
        kind = "error" if "error" in message and "result" not in message else "result"
        name = answered or ""
        return [violation(kind, name, f) for f in self._response(sender, message, answered)]

    def _envelope(self, message: dict[str, Any], required: tuple[str, ...]) -> list[Finding]:
        found: list[Finding] = []
        for member in required:
            if member not in message:
                found.append((_pointer([member]), f"required member {member}", "(absent)"))
        if "jsonrpc" in message and message["jsonrpc"] != "2.0":
            found.append(("/jsonrpc", '"2.0"', quote(message["jsonrpc"])))
        if "id" in message:
            found += self.validate_definition("RequestId", message["id"], ["id"])
        return found

    def _call(self, sender: str, kind: str, message: dict[str, Any]) -> list[Finding]:
        required = ("jsonrpc", "id", "method") if kind == "request" else ("jsonrpc", "method")
        found = self._envelope(message, required)
        method = message.get("method")
        if not isinstance(method, str):
            found.append(("/method", "type string", quote(method)))
            return found
        name = self.definition(sender, kind, method)
        if name is None:
            if not method.startswith("_"):
                known = ", ".join(sorted(self.routes[(sender, kind)]))
                found.append(
                    (
                        "/method",
                        _cut(
                            f"a method of the schema's {_ROUTES[(sender, kind)]} ({known}), or "
                            f"an extension method named _…"
                        ),
                        quote(method),
                    )
                )
            return found
        if "params" not in message:
            found.append(("/params", f"required: the params of {method} ({name})", "(absent)"))
            return found
        return found + self.validate_definition(name, message["params"], ["params"])

    def _response(
        self, sender: str, message: dict[str, Any], answered: str | None
    ) -> list[Finding]:
        found = self._envelope(message, ("jsonrpc", "id"))
        has_result, has_error = "result" in message, "error" in message
        if has_result == has_error:
            what = "both" if has_result else "neither"
            found.append(("", "exactly one of result, error", f"{what} (members {_keys(message)})"))
            return found
        if has_error:
            return found + self.validate_definition("Error", message["error"], ["error"])
        name = self.definition(sender, "response", answered) if answered else None
        if name is not None:
            found += self.validate_definition(name, message["result"], ["result"])
        return found


def _keys(message: dict[str, Any]) -> str:
    return quote(sorted(message), 80)


def _cut(text: str, limit: int = _EXPECTED_CHARS) -> str:
    text = safe_text(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _refs(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str):
            yield ref
        for value in schema.values():
            yield from _refs(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _refs(value)


Finding = tuple[str, str, str]
"""(pointer, expected, value)."""


def _unique(found: list[Finding]) -> list[Finding]:
    return list(dict.fromkeys(found))


# ---------------------------------------------------------------------------- explaining


def _const_of(branch: Any, member: str) -> Any:
    if not isinstance(branch, dict):
        return None
    prop = branch.get("properties", {}).get(member)
    return prop.get("const") if isinstance(prop, dict) else None


def _type_word(kind: Any) -> str:
    if isinstance(kind, list):
        return " or ".join(str(k) for k in kind)
    return str(kind)


class _Explain:
    """Turns a jsonschema error into findings at the member that is wrong."""

    def __init__(self, schema: MessageSchema, base: list[Any]) -> None:
        self.schema = schema
        self.base = base

    def _at(self, error: jsonschema.exceptions.ValidationError, *more: Any) -> str:
        return _pointer([*self.base, *error.absolute_path, *more])

    def _named(self, sub: Any) -> str:
        name = self.schema._names.get(id(sub))
        return f" ({name})" if name else ""

    def error(self, error: jsonschema.exceptions.ValidationError) -> list[Finding]:
        keyword = error.validator
        if keyword in ("oneOf", "anyOf") and error.context:
            return self._choice(error)
        instance = error.instance
        if keyword == "required":
            present = instance if isinstance(instance, dict) else {}
            missing = [m for m in error.validator_value if m not in present]
            named = self._named(error.schema)
            return [
                (self._at(error, m), f"required member {m}{named}", "(absent)") for m in missing
            ]
        if keyword == "type":
            expected = f"type {_type_word(error.validator_value)}{self._named(error.schema)}"
        elif keyword == "const":
            expected = quote(error.validator_value, 80)
        elif keyword == "enum":
            expected = "one of " + ", ".join(quote(v, 40) for v in error.validator_value)
        elif keyword in ("minimum", "exclusiveMinimum"):
            op = "≥" if keyword == "minimum" else ">"
            expected = f"a number {op} {error.validator_value}"
        elif keyword in ("maximum", "exclusiveMaximum"):
            op = "≤" if keyword == "maximum" else "<"
            expected = f"a number {op} {error.validator_value}"
        elif keyword in ("oneOf", "anyOf"):  # no context: several branches matched (oneOf)
            expected = f"exactly one of its {len(error.validator_value)} forms (several match)"
        else:
            expected = f"{keyword}: {error.message}"
        return [(self._at(error), _cut(expected), quote(instance))]

    def _choice(self, error: jsonschema.exceptions.ValidationError) -> list[Finding]:
        branches: list[Any] = list(error.validator_value)
        instance = error.instance
        by_branch: dict[int, list[jsonschema.exceptions.ValidationError]] = {}
        for sub in error.context or ():
            by_branch.setdefault(int(sub.relative_schema_path[0]), []).append(sub)
        schema = error.schema if isinstance(error.schema, dict) else {}
        discriminator = schema.get("discriminator", {}).get("propertyName")
        member = discriminator or _common_const(branches)
        if member is not None and isinstance(instance, dict):
            consts = [_const_of(b, member) for b in branches]
            if member in instance:
                picked = [i for i, c in enumerate(consts) if c == instance[member]]
                if not picked:
                    picked = [i for i, c in enumerate(consts) if c is None]  # a default form
                if not picked:
                    known = ", ".join(quote(c, 40) for c in consts if c is not None)
                    expected = f"one of {known}{self._named(schema)}"
                    return [(self._at(error, member), _cut(expected), quote(instance[member]))]
                return self._branch_errors(by_branch, picked)
            if all(c is not None for c in consts):
                expected = f"required member {member}{self._named(schema)}"
                return [(self._at(error, member), expected, "(absent)")]
        if branches and all(isinstance(b, dict) and "const" in b for b in branches):
            known = ", ".join(quote(b["const"], 40) for b in branches)
            return [(self._at(error), _cut(f"one of {known}"), quote(instance))]
        # no discriminator: the forms whose type fits, the closest first
        fitting = [i for i in by_branch if not _type_mismatch(by_branch[i], error)]
        if not fitting:
            forms = "; ".join(self._form(b) for b in branches)
            return [(self._at(error), _cut(f"one of: {forms}"), quote(instance))]
        best = min(fitting, key=lambda i: (len(by_branch[i]), -_depth(by_branch[i])))
        return self._branch_errors(by_branch, [best])

    def _branch_errors(
        self, by_branch: dict[int, list[jsonschema.exceptions.ValidationError]], picked: list[int]
    ) -> list[Finding]:
        found: list[Finding] = []
        for index in picked:
            for sub in by_branch.get(index, ()):
                found += self.error(sub)
        return found

    def _form(self, branch: Any) -> str:
        if not isinstance(branch, dict):
            return quote(branch, 40)
        if "$ref" in branch:
            return str(branch["$ref"]).rpartition("/")[2]
        if "type" in branch:
            return f"type {_type_word(branch['type'])}"
        refs = list(_refs(branch))
        return refs[0].rpartition("/")[2] if refs else "a form"


def _common_const(branches: list[Any]) -> str | None:
    """The member every object branch pins with a ``const`` (a discriminator not declared)."""
    names: set[str] | None = None
    for branch in branches:
        if not isinstance(branch, dict):
            return None
        pinned = {
            k
            for k, v in branch.get("properties", {}).items()
            if isinstance(v, dict) and "const" in v
        }
        names = pinned if names is None else names & pinned
    return next(iter(sorted(names))) if names else None


def _type_mismatch(
    errors: list[jsonschema.exceptions.ValidationError],
    parent: jsonschema.exceptions.ValidationError,
) -> bool:
    depth = len(parent.absolute_path)
    return any(e.validator == "type" and len(e.absolute_path) == depth for e in errors)


def _depth(errors: list[jsonschema.exceptions.ValidationError]) -> int:
    return max((len(e.absolute_path) for e in errors), default=0)
