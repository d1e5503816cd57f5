"""The error every mindrl config reader raises (standard library only)."""


class ConfigError(ValueError):
    """An invalid training config. ``str(err)`` names the config file and the dotted key.

    ``errors`` holds one line per problem when several were found in one pass.
    """

    def __init__(self, msg: str, errors: list[str] | None = None):
        super().__init__(msg)
        self.errors = list(errors) if errors else [msg]
