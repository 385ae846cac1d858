"""What the references stage keys what it remembers by: a fixed-size digest of sender texts.

A shadow pair key (``toolwatch.shadow.pair_id``), an agent name and a conversation id
(``gen_ai.conversation.id`` / ``session.id``) are attribute values, up to
``ingest.max_value_bytes`` (64 KiB) each. Kept as keys, they made the joiner's and the
conversation memory's entries as large as the sender chose, past the bytes those bound and
count. ``identity`` is what they are keyed by instead: 16 bytes (a 49-byte ``bytes``) for
texts of any length.

Distinct sequences of texts have distinct identities but with a chance of 2**-128 a pair
(BLAKE2b, ``digest_size=16``): each text is preceded by its length, so ``("ab", "c")`` and
``("a", "bc")`` differ, and encoded as UTF-8 with surrogates passed through, which is one
to one on ``str`` (a lone surrogate, which no UTF-8 text holds, included). Not secret: no
key is used, as what is hashed is the sender's own text, and its identity is never shown.

Its cost is about a microsecond for ids of tens of characters (a dictionary lookup of the
text is a fifth of one), asked once or twice per run with a pair key or conversation id;
a 64 KiB id takes about 0.2 ms.
"""

from __future__ import annotations

from hashlib import blake2b
from typing import Final

__all__ = ["IDENTITY_BYTES", "identity"]

#: The digest's length: a ``bytes`` of it holds 49 bytes (``sys.getsizeof``).
IDENTITY_BYTES: Final = 16


def identity(*texts: str) -> bytes:
    """A 16-byte digest of ``texts``, in order: equal for equal texts, distinct for distinct
    ones (see the module docstring)."""
    framed = "".join(f"{len(text)}:{text}" for text in texts)
    return blake2b(framed.encode("utf-8", "surrogatepass"), digest_size=IDENTITY_BYTES).digest()
