"""The aggregate math the passes share: compensated sums and the sample
variance (`sums`), the output columns of a window (`outputs`) and the
frame-by-frame aggregator (`Sliding`)."""
