"""The classes of ``trunner.errors``, in parts by what they are about; ``trunner.errors``
re-exports every one, names itself their module, and draws their tree."""
