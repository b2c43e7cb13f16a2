"""Status codes and the exception a failed call raises.

The codes are rdmarpc's (include/rdmarpc/status.h), which are gRPC's: the
same numbers and names on both sides of the wire, in C++ and in Python.
"""
import enum

from google.protobuf.message import DecodeError


class StatusCode(enum.IntEnum):
    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


def _code(value):
    try:
        return StatusCode(value)
    except ValueError:
        return StatusCode.UNKNOWN


class RpcError(Exception):
    """A call that ended with a status other than OK.

    A client gets it from a failed call: `code` (a StatusCode), `details`
    (the server's message) and `trailers` ([(key, value bytes)], filled for
    calls made with with_call and for streams). A handler raises it (or
    calls context.abort) to end its call with `code`: anything else a
    handler raises ends the call UNKNOWN.
    """

    def __init__(self, code, details="", trailers=()):
        self.code = _code(code)
        self.details = details
        self.trailers = list(trailers)
        super().__init__(f"{self.code.name}: {details}" if details else self.code.name)


def parse(message_class, data, code, what):
    """`data` parsed as `message_class`, or RpcError(code) naming `what`
    ("request", "response") for bytes that do not parse."""
    try:
        return message_class.FromString(data)
    except DecodeError as error:
        raise RpcError(code, f"the {what} does not parse as "
                             f"{message_class.DESCRIPTOR.full_name}: {error}") from None
