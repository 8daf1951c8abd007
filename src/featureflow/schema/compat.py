"""The version rule: how a view may change between two applies.

Compares the repo's view with the registry's current one, field by field
(entity keys included). See docs/schema-gate.md, "Compatibility rule".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from featureflow.schema.feast_repo import VERSION_TAG, ViewSpec
from featureflow.schema.model import SemVer
from featureflow.schema.report import ABSENT, Row, Status
from featureflow.schema.typemap import feast_name

if TYPE_CHECKING:
    from feast.types import FeastType


def _typed_fields(view: ViewSpec) -> dict[str, FeastType]:
    return {**dict(view.join_keys), **dict(view.features)}


def check_compatibility(view: ViewSpec, previous: ViewSpec | None) -> list[Row]:
    """The version rule against the registry's current view.

    Same version: no field may change. Lower version: refused. Major bump:
    anything goes. Minor bump: fields may be added, not removed or re-typed.
    Patch bump: no field may be added, removed or re-typed.
    """
    if previous is None:
        return [
            Row(
                Status.PASS,
                view.name,
                "compatibility",
                "",
                view.version or "",
                ABSENT,
                "not in the registry yet: nothing to be compatible with",
            )
        ]
    try:
        new = SemVer.parse(view.version or "")
        old = SemVer.parse(previous.version or "")
    except ValueError as error:
        return [
            Row(
                Status.WARN,
                view.name,
                "compatibility",
                VERSION_TAG,
                str(view.version),
                str(previous.version),
                f"cannot compare versions: {error}",
            )
        ]
    before, after = _typed_fields(previous), _typed_fields(view)
    removed = [n for n in before if n not in after]
    retyped = [n for n in before if n in after and before[n] != after[n]]
    added = [n for n in after if n not in before]
    change = f"{old} -> {new}"

    def refuse(name: str, what: str, why: str) -> Row:
        return Row(
            Status.FAIL,
            view.name,
            "compatibility",
            name,
            feast_name(before.get(name)),
            feast_name(after.get(name)) if name in after else ABSENT,
            f"{what} in {change}: {why}",
        )

    if new.key() < old.key():
        return [
            Row(
                Status.FAIL,
                view.name,
                "compatibility",
                VERSION_TAG,
                str(new),
                str(old),
                f"the version goes back from {old} to {new}: versions only increase",
            )
        ]
    if new == old:
        rows = [
            refuse(n, "removed", f"bump the major version to {old.major + 1}.0.0") for n in removed
        ]
        rows += [
            refuse(n, "re-typed", f"bump the major version to {old.major + 1}.0.0") for n in retyped
        ]
        rows += [
            Row(
                Status.FAIL,
                view.name,
                "compatibility",
                n,
                ABSENT,
                feast_name(after[n]),
                f"added without a version bump: bump to {old.major}.{old.minor + 1}.0",
            )
            for n in added
        ]
        return rows or [
            Row(Status.PASS, view.name, "compatibility", "", str(new), str(old), "unchanged")
        ]
    if new.major > old.major:
        return [
            Row(
                Status.PASS,
                view.name,
                "compatibility",
                "",
                str(new),
                str(old),
                f"major bump {change}: removed {removed or 'none'}, re-typed "
                f"{retyped or 'none'}, added {added or 'none'}",
            )
        ]
    why = f"only a major bump ({old.major + 1}.0.0) may remove or re-type a field"
    rows = [refuse(n, "removed", why) for n in removed]
    rows += [refuse(n, "re-typed", why) for n in retyped]
    if new.minor == old.minor and added:
        rows += [
            Row(
                Status.WARN,
                view.name,
                "compatibility",
                n,
                ABSENT,
                feast_name(after[n]),
                f"added in patch bump {change}: adding a field is a minor change",
            )
            for n in added
        ]
    return rows or [
        Row(
            Status.PASS,
            view.name,
            "compatibility",
            "",
            str(new),
            str(old),
            f"{change} adds {added or 'nothing'}",
        )
    ]
