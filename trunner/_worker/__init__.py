"""A worker process: ``serve`` runs one runner as ``trunner worker`` does (settings, health
and metrics, the process's signals), over the small HTTP server of ``http``. Its public
names are re-exported by ``trunner.serve``.
"""
