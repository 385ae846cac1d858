"""The live findings stream: ``toolwatch.v1.FindingsService/Subscribe`` over gRPC.

The pipeline publishes findings to a ``FindingsBroker`` as to any sink; the broker fans each
one out to the subscriptions whose filter matches and holds the latest for clients that
resume, and the gRPC service writes each subscription's findings to its client. The modules,
each importing at run time only those before it:

- ``protocol``: what the server and its clients (``toolwatch tail``) agree on beyond
  ``findings.proto``: metadata keys, the details of the statuses that end a stream, keepalive;
- ``filters``: ``StreamFilter``, what filters read of a finding (``tag_of``), and the digests
  the stream keeps of names (``agent_key``);
- ``messages``: ``finding_message``, a finding as the stream's message, its texts cut;
- ``subscription``: ``Subscription``, one subscriber's bounded queue, and ``_Replay``, what a
  resumed one is sent first;
- ``resumes``: ``Resume`` and ``ResumeResult``, and the broker's book of the findings it holds
  and of the subscribers that left: what a resume claims, what is counted lost;
- ``broker``: ``FindingsBroker``, publishing and subscribing;
- ``service``: ``FindingsStreamServicer``, the thin grpc.aio adapter, and ``deliver``.

Threading: everything here runs on the event loop that runs the grpc.aio server (``broker``).
"""
