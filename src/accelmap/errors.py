"""Errors a user can act on. The CLI prints them as one line and exits 2."""


class AccelmapError(Exception):
    """Base class of every error that is the user's input, not our bug."""


class SpecError(AccelmapError):
    """A workload, accelerator or mapping description is wrong.

    ``where`` names the file and field, so the message can say exactly what to fix.
    """

    def __init__(self, message: str, where: str | None = None):
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class MappingError(AccelmapError):
    """A mapping is well-formed but does not fit the accelerator or the operator."""
