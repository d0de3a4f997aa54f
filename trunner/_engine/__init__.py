"""The engine: the services a runner composes to process its group's messages.

``fetcher`` reads (across the ``lanes``) and reclaims messages for the ``pool``, whose job
loops run them within the ``slots`` the pool may hold, in the ``jobhost`` nursery
(``intake`` makes a job of each entry, ``attempts`` runs what is off the pool's hot path);
``holdings`` is the ledger of what this instance holds, kept fresh by ``heartbeat`` and
handed back by ``release``; ``admission`` applies the group-wide rate and concurrency
limits; ``outcomes`` ends each attempt (ack, retry or give up) through the batched
``acks`` and the ``transitions`` a failure writes, with the task's ``records``;
``cancellation`` hears cancel marks; ``pausing`` follows the group's pause mark and closes
the fetchers' gate; ``quarantine`` sets bad data aside; ``counters`` count what the runner
did (its ``statistics()``); ``reporter`` reports timings and membership; ``instruments``
defines the metrics the exporters read. Nothing here is public: the runner
(``trunner.runner``) wires them.
"""
