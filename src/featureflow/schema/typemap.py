"""The one Mojo -> Feast -> Arrow type table of featureflow schemas.

=====================================  ====================  =========================
Mojo (schema file)                     Feast                 Arrow (micro-batch)
=====================================  ====================  =========================
``Int64``                              ``Int64``             ``int64``
``Int32``                              ``Int32``             ``int32``
``Float64``                            ``Float64``           ``double``
``Float32``                            ``Float32``           ``float``
``Bool``                               ``Bool``              ``bool``
``String``                             ``String``            ``string`` / ``large_string``
``Timestamp[unit, zone]``              ``UnixTimestamp``     ``timestamp[unit, tz=zone]``
``EventTimestamp[unit, zone]``         view timestamp_field  ``timestamp[unit, tz=zone]``
``List[T]`` (T scalar or Timestamp)    ``Array(T)``          ``list<T>`` / ``large_list<T>``
``Optional[T]``                        as ``T``              as ``T``, nullable
``EntityKey[T]``                       join key of type T    as ``T``
=====================================  ====================  =========================

Feast's ``UnixTimestamp`` carries no unit or zone: Feast stores UTC instants
and hands Arrow ``timestamp[us]``, so featureflow's canonical Feast timestamp
is ``Timestamp["us", "UTC"]``.

The Arrow column's functions live in :mod:`featureflow.schema.arrowmap`, apart
from Feast: the stream job's executors check each micro-batch against its schema
without importing Feast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
from feast import types as ft

from featureflow.events import ddl as spark_ddl
from featureflow.schema.model import ListType, Scalar, ScalarType, TimestampType, ValueType

if TYPE_CHECKING:
    from feast.types import FeastType

FEAST_TIMESTAMP = TimestampType("us", "UTC")

_SCALAR_TO_FEAST: dict[Scalar, ft.PrimitiveFeastType] = {
    Scalar.INT64: ft.Int64,
    Scalar.INT32: ft.Int32,
    Scalar.FLOAT64: ft.Float64,
    Scalar.FLOAT32: ft.Float32,
    Scalar.BOOL: ft.Bool,
    Scalar.STRING: ft.String,
}
_FEAST_TO_SCALAR = {v: k for k, v in _SCALAR_TO_FEAST.items()}


def to_feast(value_type: ValueType) -> FeastType:
    """The Feast type a schema type stands for."""
    if isinstance(value_type, ScalarType):
        return _SCALAR_TO_FEAST[value_type.scalar]
    if isinstance(value_type, TimestampType):
        return ft.UnixTimestamp
    element = to_feast(value_type.element)
    return ft.Array(element)


def from_feast(dtype: FeastType) -> ValueType | None:
    """The schema type of a Feast type, or None when schemas cannot express it (Bytes, Map...)."""
    if isinstance(dtype, ft.PrimitiveFeastType):
        if dtype == ft.UnixTimestamp:
            return FEAST_TIMESTAMP
        scalar = _FEAST_TO_SCALAR.get(dtype)
        return ScalarType(scalar) if scalar is not None else None
    if isinstance(dtype, ft.Array):
        element = from_feast(dtype.base_type)
        if isinstance(element, ScalarType | TimestampType):
            return ListType(element)
    return None


def feast_name(dtype: FeastType | None) -> str:
    """How a Feast type reads in a report (``Float64``, ``Array(Int64)``)."""
    return "unknown" if dtype is None else str(dtype)


_ARROW_TO_FEAST: dict[pa.DataType, ft.PrimitiveFeastType] = {
    pa.int64(): ft.Int64,
    pa.int32(): ft.Int32,
    pa.float64(): ft.Float64,
    pa.float32(): ft.Float32,
    pa.bool_(): ft.Bool,
    pa.string(): ft.String,
    pa.timestamp("us", tz="UTC"): ft.UnixTimestamp,
}
"""Arrow types of stream-source fields that Feast has a scalar type for."""


def ddl_column_types(ddl: str) -> dict[str, FeastType]:
    """Column types of a Spark DDL schema (``"user_id long, amount double"``).

    Columns of types with no Feast scalar (structs, maps, int16, ...) are left out.
    """
    types: dict[str, FeastType] = {}
    for name, kind in spark_ddl.fields(ddl):
        arrow = spark_ddl.arrow_type(kind)
        feast_type = _ARROW_TO_FEAST.get(arrow) if arrow is not None else None
        if feast_type is not None:
            types[name] = feast_type
    return types


_ALWAYS: dict[str, ft.PrimitiveFeastType] = {
    "count": ft.Int64,
    "count_distinct": ft.Int64,
    "mean": ft.Float64,
    "avg": ft.Float64,
    "std": ft.Float64,
    "stddev": ft.Float64,
    "var": ft.Float64,
    "variance": ft.Float64,
}
_INTEGRAL = (ft.Int64, ft.Int32)


def aggregation_output(function: str, column_type: FeastType | None) -> FeastType | None:
    """The Feast type an aggregation yields, or None when it cannot be told.

    count -> Int64; mean/std/var -> Float64; sum -> Int64 over integers, else
    Float64; min/max/first/last -> the column's type.
    """
    if function in _ALWAYS:
        return _ALWAYS[function]
    if column_type is None:
        return None
    if function == "sum":
        return ft.Int64 if column_type in _INTEGRAL else ft.Float64
    if function in ("min", "max", "first", "last"):
        return column_type
    return None
