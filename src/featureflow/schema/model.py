"""The feature schema as data: what a ``schemas/<view>.mojo`` file declares.

These classes know nothing of Mojo's toolchain, Feast or Arrow; the reader
builds them from ``mojo doc`` output, the writer renders them back to Mojo,
and the checks compare them with Feast's definitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Scalar(StrEnum):
    """The scalar Mojo types a schema may use (spelled as in Mojo)."""

    INT64 = "Int64"
    INT32 = "Int32"
    FLOAT64 = "Float64"
    FLOAT32 = "Float32"
    BOOL = "Bool"
    STRING = "String"


# Resolutions a timestamp may declare, coarsest first (Arrow's unit names).
TIME_UNITS: tuple[str, ...] = ("s", "ms", "us", "ns")


@dataclass(frozen=True)
class ScalarType:
    """A scalar value: ``Int64``, ``Float64``, ``String``, ..."""

    scalar: Scalar

    def __str__(self) -> str:
        return self.scalar.value


@dataclass(frozen=True)
class TimestampType:
    """An instant with a resolution (``unit``) and a time zone (``zone``)."""

    unit: str
    zone: str

    def __str__(self) -> str:
        return f'Timestamp["{self.unit}", "{self.zone}"]'


@dataclass(frozen=True)
class ListType:
    """A list of scalars or timestamps (Feast ``Array``; no nested lists)."""

    element: ScalarType | TimestampType

    def __str__(self) -> str:
        return f"List[{self.element}]"


ValueType = ScalarType | TimestampType | ListType


class Role(StrEnum):
    """What a field is to the feature view."""

    ENTITY_KEY = "entity key"
    EVENT_TIMESTAMP = "event timestamp"
    FEATURE = "feature"


@dataclass(frozen=True)
class SchemaField:
    """One ``var name: Type`` of the schema struct."""

    name: str
    type: ValueType
    role: Role = Role.FEATURE
    nullable: bool = False
    line: int = field(default=0, compare=False)

    @property
    def mojo_type(self) -> str:
        """The field's type as written in Mojo, markers included."""
        if self.role is Role.EVENT_TIMESTAMP and isinstance(self.type, TimestampType):
            text = f'EventTimestamp["{self.type.unit}", "{self.type.zone}"]'
        elif self.role is Role.ENTITY_KEY:
            text = f"EntityKey[{self.type}]"
        else:
            text = str(self.type)
        return f"Optional[{text}]" if self.nullable else text


@dataclass(frozen=True)
class FeatureSchema:
    """A feature view's schema: its name, semantic version and fields in file order."""

    view: str
    version: str
    struct_name: str
    fields: tuple[SchemaField, ...]
    path: str = field(default="", compare=False)
    line: int = field(default=0, compare=False)

    @property
    def entity_keys(self) -> tuple[SchemaField, ...]:
        """The fields marked ``EntityKey[...]``."""
        return tuple(f for f in self.fields if f.role is Role.ENTITY_KEY)

    @property
    def event_timestamps(self) -> tuple[SchemaField, ...]:
        """The fields marked ``EventTimestamp[...]`` (a valid schema has exactly one)."""
        return tuple(f for f in self.fields if f.role is Role.EVENT_TIMESTAMP)

    @property
    def features(self) -> tuple[SchemaField, ...]:
        """The feature fields (neither key nor event timestamp)."""
        return tuple(f for f in self.fields if f.role is Role.FEATURE)

    def get(self, name: str) -> SchemaField | None:
        """The field called ``name``, or None."""
        return next((f for f in self.fields if f.name == name), None)


@dataclass(frozen=True)
class SemVer:
    """A semantic version ``MAJOR.MINOR.PATCH``."""

    major: int
    minor: int
    patch: int

    @classmethod
    def parse(cls, text: str) -> SemVer:
        """Parse ``"1.2.3"``; raises ValueError naming the expected form otherwise."""
        parts = text.split(".")
        if len(parts) != 3 or not all(p.isdigit() and p.isascii() for p in parts):
            msg = f"a semantic version MAJOR.MINOR.PATCH such as 1.0.0, not {text!r}"
            raise ValueError(msg)
        major, minor, patch = (int(p) for p in parts)
        return cls(major, minor, patch)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    def key(self) -> tuple[int, int, int]:
        """Sort key."""
        return (self.major, self.minor, self.patch)
