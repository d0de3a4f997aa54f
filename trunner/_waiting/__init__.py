"""Waiting for a task's outcome, for every producer: the event-loop port the waits run on
(``runtime``), what a look at a task's record says (``protocol``, no I/O), the one
subscription per client that wakes the waits (``waiters``), and the calls in flight that a
client's close waits for (``calls``).

Below the handles (``trunner.handles``) and the producer (``_producer``), which both wait
through it; it imports only the values, the wire and the Redis boundary.
"""
