"""Marker types for featureflow feature schemas.

A feature schema (`schemas/<feature_view>.mojo`) is one Mojo struct whose
fields are the view's entity keys, its event timestamp and its features. Plain
stdlib types carry the scalar and container types (`Int64`, `Int32`,
`Float64`, `Float32`, `Bool`, `String`, `List[T]`, and `Optional[T]` for a
value that may be null); this package adds the three roles the stdlib has no
word for:

- `EntityKey[T]`: the field is an entity join key of type `T`.
- `EventTimestamp[unit, zone]`: the field is the view's event timestamp.
- `Timestamp[unit, zone]`: a timestamp-valued feature.

`unit` is one of `"s"`, `"ms"`, `"us"`, `"ns"`; `zone` an IANA zone name such
as `"UTC"`. The types are markers: featureflow reads them with `mojo doc`, and
`mojo doc` / `mojo build --emit object` accept any schema that uses them.
Pass this package's parent folder with `-I` (print it with
`featureflow schema include-path`).
"""


struct EntityKey[T: AnyType]:
    """Marks an entity join key whose values have type `T`.

    Parameters:
        T: The key's type: `Int64`, `Int32` or `String`.
    """

    pass


struct EventTimestamp[unit: StaticString, zone: StaticString]:
    """Marks the event timestamp of the view (Feast's `timestamp_field`).

    Parameters:
        unit: Resolution: `"s"`, `"ms"`, `"us"` or `"ns"`.
        zone: IANA time zone of the instants, e.g. `"UTC"`.
    """

    var epoch: Int64
    """Instants since the Unix epoch, in `unit`."""


struct Timestamp[unit: StaticString, zone: StaticString]:
    """A timestamp-valued feature (Feast `UnixTimestamp`).

    Parameters:
        unit: Resolution: `"s"`, `"ms"`, `"us"` or `"ns"`.
        zone: IANA time zone of the instants, e.g. `"UTC"`.
    """

    var epoch: Int64
    """Instants since the Unix epoch, in `unit`."""
