"""A reader of geodlq's dead-letter envelopes (dlq.v1) in Python.

It validates an envelope against the published JSON Schema and the byte
rules a schema cannot state, restores the original payload byte for byte
(inline, string and base64 encodings, and geometries or whole payloads
offloaded to a file:// blob directory, each verified by its SHA-256), and
recomputes payload_sha256. It needs only the standard library and
python3-jsonschema (Debian's package). Memory is linear in the envelope's
size (two to three times an envelope of 21 MB the Go Builder wrote); every
failure, a MemoryError included, is an EnvelopeError (LimitError for a
limit).

    from geodlq_reader import Reader, BlobDirFetcher
    env = Reader().read(open("envelope.json", "rb").read())
    payload = env.restore(BlobDirFetcher("/var/lib/dlq"))
"""

from .envelope import (MISSING_GEOMETRY, SCHEMA_VERSION, BlobDirFetcher, BlobNotFound, Envelope, EnvelopeError,
                       IntegrityError, InvalidEnvelope, LimitError, NotRegular, OutsideStore, Reader, VersionError,
                       default_schema_path)

__all__ = ["MISSING_GEOMETRY", "SCHEMA_VERSION", "BlobDirFetcher", "BlobNotFound", "Envelope", "EnvelopeError",
           "IntegrityError", "InvalidEnvelope", "LimitError", "NotRegular", "OutsideStore", "Reader", "VersionError",
           "default_schema_path"]
