"""The gate's report: one row per check, rendered as a table or JSON."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass
from enum import StrEnum

# What ``expected`` or ``actual`` says when one side lacks the field.
ABSENT = "absent"


class Status(StrEnum):
    """Outcome of one check."""

    PASS = "✅"
    WARN = "⚠️"
    FAIL = "❌"

    @property
    def word(self) -> str:
        """``pass`` / ``warn`` / ``fail``, for JSON."""
        return self.name.lower()


@dataclass(frozen=True)
class Row:
    """One check: which view and field, what the schema expects, what was found."""

    status: Status
    view: str
    check: str
    field: str = ""
    expected: str = ""
    actual: str = ""
    detail: str = ""


_COLUMNS = ("view", "check", "field", "expected", "actual", "detail")


@dataclass(frozen=True)
class Report:
    """Every row of one gate run; ``ok`` when none failed."""

    rows: tuple[Row, ...]

    @property
    def ok(self) -> bool:
        """No ❌ row."""
        return not any(r.status is Status.FAIL for r in self.rows)

    @property
    def ok_strict(self) -> bool:
        """No ❌ and no ⚠️ row."""
        return all(r.status is Status.PASS for r in self.rows)

    @property
    def failures(self) -> tuple[Row, ...]:
        """The ❌ rows."""
        return tuple(r for r in self.rows if r.status is Status.FAIL)

    @property
    def warnings(self) -> tuple[Row, ...]:
        """The ⚠️ rows."""
        return tuple(r for r in self.rows if r.status is Status.WARN)

    def exit_status(self, *, strict: bool = False) -> int:
        """0 when the gate passes, 1 on any ❌ (and on any ⚠️ when ``strict``)."""
        return 0 if (self.ok_strict if strict else self.ok) else 1

    def summary(self) -> str:
        """``"20 ✅, 1 ⚠️, 2 ❌"``."""
        counts = Counter(r.status for r in self.rows)
        return ", ".join(f"{counts[s]} {s.value}" for s in Status)

    def to_table(self, *, only_problems: bool = False) -> str:
        """A plain-text table, one row per check, then a summary line."""
        rows = [r for r in self.rows if r.status is not Status.PASS] if only_problems else self.rows
        cells = [list(_COLUMNS)] + [[str(getattr(r, c)) for c in _COLUMNS] for r in rows]
        widths = [max(len(line[i]) for line in cells) for i in range(len(_COLUMNS) - 1)]
        # Each mark is two terminal cells wide, like the header's two spaces.
        marks = ["  "] + [r.status.value for r in rows]
        lines = []
        for mark, line in zip(marks, cells, strict=True):
            padded = [text.ljust(width) for text, width in zip(line, widths, strict=False)]
            lines.append(f"{mark} " + "  ".join([*padded, line[-1]]).rstrip())
        verdict = "PASS" if self.ok else "FAIL"
        lines.append(f"{verdict}: {self.summary()}")
        return "\n".join(lines)

    def to_json(self) -> str:
        """The report as JSON: ``ok``, counts, and every row with ``status`` as a word."""
        counts = Counter(r.status.word for r in self.rows)
        data = {
            "ok": self.ok,
            "ok_strict": self.ok_strict,
            "counts": {s.word: counts[s.word] for s in Status},
            "rows": [{**asdict(r), "status": r.status.word} for r in self.rows],
        }
        return json.dumps(data, indent=2, ensure_ascii=False)

    def __add__(self, other: Report) -> Report:
        return Report(self.rows + other.rows)
