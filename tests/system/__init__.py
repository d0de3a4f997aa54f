"""The whole system from outside: worker processes under faults, the command line, the
demo, the examples and the test kit."""
