"""How a task body runs: one protocol (``base``) and an executor per place a body runs in
(the event loop, worker threads: ``threads``), the stall watchdog's thread (``watchdog``),
``isolated`` (a coroutine in a context of its own, reporting its first wait: the pool's job
loops), and ``eager`` (a task's attempts run at once, without Redis: ``TaskRegistry.call``
and the test kit). Nothing here is public.
"""
