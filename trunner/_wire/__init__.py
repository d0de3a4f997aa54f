"""The wire format: what trunner stores in Redis and how it is read back.

Values only, with no I/O: the stored envelope of a message (``envelope``), its decoding
into what task code sees (``decode``) and the header rules (``headers``); the key names
(``keys``) and the names and ids they hold, checked (``names``); typed payloads and
results (``codec``), the limit values (``limits``), the group statistics records
(``stats``), what a payload with no JSON form is (``payload``), the per-task record
(``record``), the pause notices and mark (``pause``), the quarantine's records
(``quarantine``) and the inspection values (``inspection``). The Redis boundary
(``_redis``) and everything above it build on these modules; they import nothing above
themselves.
"""
