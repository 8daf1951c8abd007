"""Write features into Feast's online store at stream speed, in Feast's own layout.

``write(store, view, table)`` serialises a whole Arrow batch at once (entity
keys, ``ValueProto`` values, timestamps) and writes it to SQLite in one
transaction or to Redis in WATCH/MULTI/EXEC chunks of plain HSETs, so Feast's
``get_online_features`` reads the rows back unchanged. Older rows never
replace newer ones. Other stores fall back to Feast's own writer.
``write_views(store, {view: table})`` writes several views at once: on Redis one
``HSET`` per entity for all of them (Feast keeps one hash per entity key).

Modules: ``_bytes`` (vectorised byte strings), ``encoding`` (Feast's bytes),
``batch`` (checking and deduplicating the table), ``sqlite`` and ``redis``
(the stores), ``write`` (dispatch and fallback).
"""

from featureflow.online.write import WriteStats, write, write_views

__all__ = ["WriteStats", "write", "write_views"]
