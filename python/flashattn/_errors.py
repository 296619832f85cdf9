"""Exceptions for a call libflashattn rejected, one per flashattn_status.

Each also derives from the built-in exception a Python caller would expect for that kind of
failure, so `except ValueError` works as well as `except flashattn.Error`.
"""
from . import _abi


class Error(Exception):
    """A call flashattn rejected or could not run; `status` is the flashattn_status code."""

    status = _abi.ERR_INTERNAL


class InvalidArgumentError(Error, ValueError):
    """An argument broke one of flashattn's rules; the message names it and the rule."""

    status = _abi.ERR_INVALID_ARGUMENT


class UnsupportedError(Error, NotImplementedError):
    """Valid arguments this build or machine cannot run (no CUDA, a backend on the wrong device)."""

    status = _abi.ERR_UNSUPPORTED


class CudaError(Error, RuntimeError):
    """A CUDA runtime call or kernel launch failed."""

    status = _abi.ERR_CUDA


class InternalError(Error, RuntimeError):
    """A failure inside flashattn that is none of the above (out of host memory, say)."""

    status = _abi.ERR_INTERNAL


_BY_STATUS = {cls.status: cls for cls in (InvalidArgumentError, UnsupportedError, CudaError)}


def from_status(status, message):
    """The exception for a non-zero flashattn_status and flashattn_last_error()'s message."""
    return _BY_STATUS.get(status, InternalError)(message)
