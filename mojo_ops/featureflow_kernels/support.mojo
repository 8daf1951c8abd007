"""Which path can take which aggregates, in one place: the rolling and
sessions dispatchers ask these predicates.
"""

from featureflow_kernels.abi import A_DISTINCT, A_MAX, A_STD, A_VAR, Column


def stream_supported(cols: List[Column]) -> Bool:
    for ref c in cols:
        if c.agg == A_DISTINCT:
            return False
    return True


def bucketed_supported(cols: List[Column]) -> Bool:
    """The bucketed path computes count, sum, mean, min and max."""
    for ref c in cols:
        if c.agg > A_MAX:
            return False
    return True


def sessions_in_order_supported(cols: List[Column]) -> Bool:
    for ref c in cols:
        if c.agg == A_STD or c.agg == A_VAR or c.agg == A_DISTINCT:
            return False
    return True
