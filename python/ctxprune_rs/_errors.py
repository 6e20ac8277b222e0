"""The package's exceptions. Every error the crate reports arrives as one of these, with
the crate's one-line message naming the argument, row or field at fault."""


class CtxpruneError(Exception):
    """Base class of every ctxprune error."""


class InvalidInputError(CtxpruneError, ValueError):
    """Bad input: a value, a shape, a dtype, an option that does not apply. A ValueError."""


class FileError(CtxpruneError, OSError):
    """A file (a config.json, a tokenizer.json) could not be read. An OSError."""


class BackendError(CtxpruneError):
    """The device cannot be used, failed while running, or does not implement the
    operation. The CPU engine still works."""


class OracleError(CtxpruneError):
    """The reranking oracle failed: a server that is unreachable or answers badly, or a
    callable that returned the wrong number of scores or a score outside [0, 1]. (An
    exception raised inside a callable oracle propagates as it is.)"""


__all__ = ["CtxpruneError", "InvalidInputError", "FileError", "BackendError", "OracleError"]
