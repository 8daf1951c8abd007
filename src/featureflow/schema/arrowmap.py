"""Schema type -> the Arrow type of its micro-batch column (the right-hand column of
:mod:`featureflow.schema.typemap`'s table).

Apart from the Feast side of the table so that checking a micro-batch
(:func:`featureflow.schema.check_batch`, on Spark's executors) imports no Feast.
"""

from __future__ import annotations

import pyarrow as pa

from featureflow.schema.model import ListType, Scalar, ScalarType, TimestampType, ValueType

_SCALAR_TO_ARROW: dict[Scalar, pa.DataType] = {
    Scalar.INT64: pa.int64(),
    Scalar.INT32: pa.int32(),
    Scalar.FLOAT64: pa.float64(),
    Scalar.FLOAT32: pa.float32(),
    Scalar.BOOL: pa.bool_(),
    Scalar.STRING: pa.string(),
}


def to_arrow(value_type: ValueType) -> pa.DataType:
    """The Arrow type a micro-batch column of this schema type has."""
    if isinstance(value_type, ScalarType):
        return _SCALAR_TO_ARROW[value_type.scalar]
    if isinstance(value_type, TimestampType):
        return pa.timestamp(value_type.unit, tz=value_type.zone)
    return pa.list_(to_arrow(value_type.element))


def arrow_matches(actual: pa.DataType, value_type: ValueType) -> bool:
    """Whether an Arrow column type carries this schema type (large variants allowed)."""
    if isinstance(value_type, ListType):
        if pa.types.is_list(actual) or pa.types.is_large_list(actual):
            return arrow_matches(actual.value_type, value_type.element)
        return False
    if isinstance(value_type, ScalarType) and value_type.scalar is Scalar.STRING:
        return pa.types.is_string(actual) or pa.types.is_large_string(actual)
    return bool(actual == to_arrow(value_type))
