"""The raw reply reader of the Redis writer, on a real socket: replies split anywhere
between packets, and integer replies of 0 (which equal ``False``, hiredis's usual
"more bytes needed" answer) read as replies."""

from __future__ import annotations

import socket
import threading
import time

from redis.exceptions import ResponseError

from featureflow.online.redis import _Replies

_STREAM = b":0\r\n:19\r\n*2\r\n$3\r\nabc\r\n$-1\r\n+QUEUED\r\n-ERR no\r\n:0\r\n"


def _readable(replies: list[object]) -> list[object]:
    return ["error" if isinstance(r, ResponseError) else r for r in replies]


def test_many_reads_replies_arriving_a_byte_at_a_time() -> None:
    ours, theirs = socket.socketpair()

    def trickle() -> None:
        for i in range(len(_STREAM)):
            theirs.sendall(_STREAM[i : i + 1])
            time.sleep(0.002)

    with ours, theirs:
        sender = threading.Thread(target=trickle)
        sender.start()
        replies = _Replies(ours)
        assert _readable(replies.many(3)) == [0, 19, [b"abc", None]]
        assert isinstance(replies.skip(2), ResponseError)  # QUEUED, then the error
        assert replies.many(0) == []
        assert replies.next() == 0
        sender.join()
