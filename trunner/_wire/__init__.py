"""The wire format: what trunner stores in Redis and how it is read back.

Values only, with no I/O: the key names (``keys``), the message envelope (``envelope``),
how a stored entry is read back (``decode``), the header rules (``headers``), typed
payloads and results (``codec``), the limit values (``limits``), the group statistics
records (``stats``) and what a payload with no JSON form is (``payload``). The Redis
boundary (``_redis``) and everything above it build on these modules; they import nothing
above themselves.
"""
