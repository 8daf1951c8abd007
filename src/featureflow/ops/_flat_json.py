"""What the flat-JSON kernel (``json_flat.mojo``) is asked for and what it gives back.

The kernel reads the records it can read exactly (one flat object of ASCII text,
no escapes, numbers it converts exactly: see the ``.mojo`` file) and leaves every
other record to the caller's per-record parser. The numpy backend has no such
pass: there every record is the caller's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

FlatKind = Literal["int", "double", "string", "bool"]
KIND_CODES: dict[str, int] = {"int": 0, "double": 1, "string": 2, "bool": 3}
"""``K_*`` of json_flat.mojo."""


@dataclass(frozen=True)
class FlatField:
    """A declared field: its name, what it takes, and for ``int`` its range (inclusive)."""

    name: str
    kind: FlatKind
    lowest: int = 0
    highest: int = 0


@dataclass(frozen=True)
class FlatColumn:
    """One field's values over every row (rows left to the caller read null, valid,
    absent). ``values``: int64 (``int``; ``bool`` as 0/1), float64 (``double``), or for
    ``string`` the int32 offsets (n + 1) into ``text``."""

    values: np.ndarray
    null: np.ndarray
    """bool: absent, JSON null, or a value the field does not take."""
    valid: np.ndarray
    """bool: absent, null, or a value of the field's type (in range)."""
    present: np.ndarray
    """bool: present and not JSON null (of any type)."""
    text: np.ndarray | None = None
    """``string``: the values' bytes (uint8), back to back."""


@dataclass(frozen=True)
class FlatRead:
    """The kernel's reading of a batch: which rows it left, and each field's column."""

    left: np.ndarray
    """bool per row: not read here (the caller's per-record parser reads it)."""
    columns: list[FlatColumn]
