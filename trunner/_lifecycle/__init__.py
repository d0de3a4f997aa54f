"""A runner's life: how one run is assembled from the engine's services and the leader's
chores (``assembly``), and how it is shut down, in order (``shutdown``).

Above both the engine (``_engine``) and the leader (``_leader``), which it wires together;
``trunner.runner`` is its only user.
"""
