"""The aggregate math the passes share: the aggregation contract (`contract`,
and its deletable half for the rolling passes, `deletable`), compensated sums
and the sample variance (`sums`), the output columns of a window (`outputs`)
and the frame-by-frame aggregator (`Sliding`)."""
