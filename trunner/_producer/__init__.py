"""The producer: dispatching tasks, waiting for their outcomes, and administering a
group, each over one broker.

Its modules import each other directly; this package re-exports nothing, so that
importing one of them loads no other.
"""
