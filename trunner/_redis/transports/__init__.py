"""The transports, one module per way of reaching Redis (as httpcore's ``_backends/``):
:mod:`.base` says what each promises, :mod:`.connect` picks one for a URL.

Nothing is imported here, so that loading one transport loads no other client library.
"""
