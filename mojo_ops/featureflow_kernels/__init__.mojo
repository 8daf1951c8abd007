"""featureflow's window kernels over Arrow buffers passed by address.

Rolling (RANGE and sawtooth frames), hopping and session aggregates, read
from the caller's buffers in place and written into its output columns. The
Python extension is the thin module `mojo_ops/kernels.mojo`; this package
holds the algorithms, one a file:

- `abi`: codes, the descriptor header, the ABI version and source digest.
- `buffers`, `order`: typed loads and stores, scratch; sorting and grouping.
- `agg`: the aggregate math the passes share: the aggregation contract
  (`contract`: `Aggregator`, `Running`, `FrameAggregator`; `deletable`: the
  count, sum and moments of the rolling passes, `Sliding` and the frame
  states), sums, outputs, `Sliding`.
- `support`: which path can take which aggregates.
- `rolling`: the entry points, then one file per path (`_grouped`, `_stream`,
  `_region`, `_inorder`, `_bucketed`, `_slots`, `_generic`), and the stream
  job's frames at query points (`_query`) with the frame states they resume
  between calls (`_resume`).
- `sessions`: the entry point, then `_in_order`, `_by_close` (their key state:
  `_state.SessionKey`), `_generic`.
- `hopping`, `keys`; `runs`: merging runs sorted by (key, ts) (state compaction).
- Beside the windows, the stream job's byte passes: `json_flat` (flat JSON
  records to typed columns), `stamps` (event timestamp texts to epoch µs),
  `byte_rows` (the online writers' rows joined from their parts), `checksums`
  (Redis's CRC-64 of the online writer's `RESTORE` payloads) and `hash_payloads`
  (those payloads, whole).

Scratch memory is allocated by the caller from the Arrow pool; sizes are
asked of the `*_scratch_bytes` functions through the bindings.
"""
