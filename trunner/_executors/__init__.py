"""How a task body runs: ``isolated`` runs a coroutine in a context of its own and reports
its first wait (the pool's job loops), and ``eager`` runs a task's attempts at once, without
Redis (``TaskRegistry.call`` and the test kit). Nothing here is public.
"""
