"""What the findings stream's server and its clients (``toolwatch tail``) agree on beyond
``findings.proto``: the metadata of a subscription (initial: that it is live, its stream,
the sequence a new subscriber's cursor starts at, how a resume went, the token a resume
sends back; trailing: the losses no finding told), the details of the statuses that end a
stream (``SHUTTING_DOWN``, ``CLIENT_CAS_CHANGED``, ``SUPERSEDED``), and keepalive
(``KEEPALIVE_SECONDS``, ``stream_server_options``).

Threading: constants and a pure function; any thread.
"""

from __future__ import annotations

__all__ = [
    "CLIENT_CAS_CHANGED",
    "KEEPALIVE_SECONDS",
    "MISSED_AFTER_KEY",
    "MISSED_FROM_REPLAY_KEY",
    "RESUME_KEY",
    "RESUME_LOST_KEY",
    "RESUME_TOKEN_KEY",
    "SHUTTING_DOWN",
    "STREAM_ID_KEY",
    "STREAM_SEQUENCE_KEY",
    "SUBSCRIBED_METADATA",
    "SUPERSEDED",
    "stream_server_options",
]


#: Initial metadata sent once a subscription is live (clients may wait for it).
SUBSCRIBED_METADATA = (("toolwatch-subscribed", "1"),)
#: Initial metadata keys (findings.proto, FindingsService): the stream, the sequence a new
#: subscriber's cursor starts at, and how a resume went.
STREAM_ID_KEY = "toolwatch-stream-id"
STREAM_SEQUENCE_KEY = "toolwatch-stream-sequence"
RESUME_KEY = "toolwatch-resume"
RESUME_LOST_KEY = "toolwatch-resume-lost"
#: Initial metadata: the subscription's token, which a resume sends back (``StreamCursor.token``)
#: to claim what was held for it (``FindingsBroker._resumes``).
RESUME_TOKEN_KEY = "toolwatch-resume-token"
#: Trailing metadata of a stream the server ended: losses not told in a finding
#: (``Subscription.untold``), and how many of them its replay lost.
MISSED_AFTER_KEY = "toolwatch-missed-after"
MISSED_FROM_REPLAY_KEY = "toolwatch-missed-from-replay"
#: Keepalive: a subscriber's connection can go silent without a reset (a NAT or proxy that
#: forgot it). A client that only reads would wait on it forever, and the server would keep
#: its subscription, and one of ``max_subscribers`` slots, for hours. Clients ping
#: (``toolwatch tail`` every ``KEEPALIVE_SECONDS``); the server pings each client too.
KEEPALIVE_SECONDS = 30


def stream_server_options(keepalive: float = KEEPALIVE_SECONDS) -> tuple[tuple[str, int], ...]:
    """gRPC options of the findings stream's server, for clients that ping every
    ``keepalive`` seconds: it takes their pings even while it has no finding to send (gRPC's
    default refuses more than one in 5 minutes), and pings each client every twice that
    itself, so the subscription of a connection gone silent ends, and its findings are
    counted, within 2⅓ ``keepalive`` (gRPC core times a ping out by ``ping_timeout_ms`` since
    its ping rework, by ``keepalive_timeout_ms`` before: both are set)."""
    timeout_ms = round(keepalive * 1000 / 3)
    return (
        ("grpc.http2.min_ping_interval_without_data_ms", timeout_ms),
        ("grpc.keepalive_time_ms", round(keepalive * 2000)),
        ("grpc.keepalive_timeout_ms", timeout_ms),
        ("grpc.http2.ping_timeout_ms", timeout_ms),
        ("grpc.http2.max_pings_without_data", 0),  # an idle stream sends no data
    )


#: The details of the UNAVAILABLE a subscription gets from a server shutting down.
SHUTTING_DOWN = "toolwatch is shutting down"
#: The details of the UNAVAILABLE every open subscription gets when a reload takes a CA out
#: of the client CA file (``FindingsStreamServicer.reconnect_all``): its client is to
#: subscribe again, on a new connection, whose TLS handshake the CAs served now decide.
CLIENT_CAS_CHANGED = (
    "the client CAs changed (security.tls.client_ca_file): connect again, through a new TLS"
    " handshake"
)
#: The details of the ABORTED a subscription gets when another subscription resumes with its
#: token (``FindingsBroker._supersede``): two clients sharing one token take the stream from
#: each other at each resume. Its own client's resume, come before its old connection was
#: seen gone, sends it to that dead connection.
SUPERSEDED = (
    "another client resumed with this subscription's token, and has the stream now: give each"
    " client its own token (each toolwatch tail its own --cursor-file)"
)
