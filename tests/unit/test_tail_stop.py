"""``TailStop``: a stop (SIGTERM, Ctrl-C) raises where tail's own code runs, and inside gRPC's
code cancels the call followed instead (the whole CLI: tests/integration/
test_tail_stop_inside_grpc.py)."""

from __future__ import annotations

import socket
import sys
from types import FrameType

import grpc
import pytest
from grpc import _common

from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc
from toolwatch.tail_stop import TailStop


def a_frame_inside_grpc() -> FrameType:
    """A frame of this module's code called from gRPC's (its deserializing of a message)."""
    frames: list[FrameType] = []

    def deserialize(_data: bytes) -> object:
        frames.append(sys._getframe())
        return object()

    _common.deserialize(b"", deserialize)
    return frames[0]


def test_a_stop_in_tails_own_code_raises_there() -> None:
    stop = TailStop()
    with pytest.raises(KeyboardInterrupt):
        stop.request(sys._getframe())
    assert stop.requested
    with pytest.raises(KeyboardInterrupt):
        stop.check()


def test_a_stop_inside_grpc_raises_nothing_and_cancels_the_call_followed() -> None:
    with socket.socket() as probe:  # a port nothing listens on: the call waits for ready
        probe.bind(("127.0.0.1", 0))
        target = f"127.0.0.1:{probe.getsockname()[1]}"
    with grpc.insecure_channel(target) as channel:
        stub = findings_pb2_grpc.FindingsServiceStub(channel)  # type: ignore[no-untyped-call]
        call = stub.Subscribe(findings_pb2.SubscribeRequest(), wait_for_ready=True)
        with TailStop() as stop:
            stop.follow(call)
            stop.request(a_frame_inside_grpc())  # returns: no KeyboardInterrupt there
            assert call.code() == grpc.StatusCode.CANCELLED  # waits for the cancel
        assert stop.requested
        with pytest.raises(KeyboardInterrupt):  # tail stops once out of gRPC's code
            stop.check()


def test_a_stop_that_came_while_the_call_was_made_raises_as_it_is_followed() -> None:
    """Inside gRPC's code before there is a call to cancel (making the channel or the call):
    tail stops as it would follow it."""
    stop = TailStop()
    stop.request(a_frame_inside_grpc())
    with pytest.raises(KeyboardInterrupt):
        stop.follow(_NoCall())


class _NoCall:
    def cancel(self) -> bool:
        return False
