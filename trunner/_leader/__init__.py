"""The leader: the elector of a group's lease, and the chores only the leader does.

``leadership`` runs and supervises the chores for each leadership the ``election`` wins:
``mover`` (due delayed tasks and retries into the streams), ``cron`` (each tick once,
group-wide), ``aggregator`` (group statistics and the capacity decision) and ``janitor``
(gone consumers, old finished messages). The public names of the elector are re-exported
by ``trunner.election``.
"""
