"""Entry points of the subprocesses some tests start: ``python -m tests.processes.<name>``."""
