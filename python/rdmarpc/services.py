"""Stubs and servicer base classes, made at run time from the descriptors
of protoc's Python output (`protoc --python_out`), so no plugin is needed:

    from examples.kv import kv_pb2
    kv = rdmarpc.services(kv_pb2)
    stub = kv.KeyValueStub(channel)       # a method per rpc
    class Store(kv.KeyValueServicer): ... # async def per rpc
"""
import types

from google.protobuf import symbol_database

from . import client
from .status import RpcError, StatusCode

try:  # protobuf 4.x
    from google.protobuf.message_factory import GetMessageClass as _message_class
except ImportError:  # protobuf 3.x, as Debian 12 has it
    _message_class = symbol_database.Default().GetPrototype

_KINDS = {
    (False, False): client.UnaryUnary,
    (False, True): client.UnaryStream,
    (True, False): client.StreamUnary,
    (True, True): client.StreamStream,
}


def _idempotent(method):
    level = method.GetOptions().idempotency_level
    return level != 0  # NO_SIDE_EFFECTS or IDEMPOTENT


def stub_class(service):
    """A stub class for `service` (a ServiceDescriptor): Stub(channel)."""
    methods = {m.name: m for m in service.methods}

    def __init__(self, channel):
        for name, method in methods.items():
            kind = _KINDS[(method.client_streaming, method.server_streaming)]
            setattr(self, name, kind(channel, service.full_name, name,
                                     _message_class(method.output_type),
                                     _idempotent(method)))

    return type(f"{service.name}Stub", (), {
        "__init__": __init__, "DESCRIPTOR": service,
        "__doc__": f"Client of {service.full_name}."})


def servicer_class(service):
    """A base class for implementations of `service`: each method, until
    overridden, ends its call UNIMPLEMENTED."""
    def unimplemented(name):
        async def method(self, request, context):
            raise RpcError(StatusCode.UNIMPLEMENTED,
                           f"{service.full_name}.{name} is not implemented")
        method.__name__ = name
        return method

    body = {m.name: unimplemented(m.name) for m in service.methods}
    body["DESCRIPTOR"] = service
    body["_rdmarpc_request_classes"] = {
        m.name: _message_class(m.input_type) for m in service.methods}
    body["__doc__"] = f"Implementation base of {service.full_name}."
    return type(f"{service.name}Servicer", (), body)


def services(module):
    """For each service of a protoc-generated module (foo_pb2): FooStub and
    FooServicer, in a namespace."""
    names = {}
    for service in module.DESCRIPTOR.services_by_name.values():
        names[f"{service.name}Stub"] = stub_class(service)
        names[f"{service.name}Servicer"] = servicer_class(service)
    return types.SimpleNamespace(**names)
