// _rdmarpc: the C++ half of the Python package (python/rdmarpc/ is the other
// half, and the API users see; docs/python.md).
//
// What crosses the boundary, and how:
//  - Messages cross as serialized bytes: Python's protobuf classes serialize
//    and parse them, and no descriptor is registered twice.
//  - Attachments cross without a copy when their memory is the library's:
//    a buffer inside a live MemoryRegistration (rdmarpc.allocate(), or any
//    view of it) goes out as a Slice of it, and a received attachment is a
//    ReceivedBuffer, a window on the block it landed in, which can be sent
//    on again as it is. Any other buffer is copied once into a heap Buffer,
//    and the copy is counted (copies()), so a test can prove there was none.
//  - Completions go through an EventQueue (events.h); no callback the
//    library runs on its threads touches a Python object or the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "events.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/memory.h"
#include "rdmarpc/server.h"
#include "rdmarpc/service.h"

namespace py = pybind11;

namespace rdmarpc::python {
namespace {

// ---- Attachments ----------------------------------------------------------

std::atomic<uint64_t> g_copies{0};
std::atomic<uint64_t> g_copied_bytes{0};

// A received attachment: the Buffer the transport handed over, shared so
// that Python views of it and a send of it onward can outlive each other.
struct Received {
  std::shared_ptr<Buffer> buffer;
};

// Memory from rdmarpc.allocate(): registered once, sent from in place.
struct Memory {
  std::shared_ptr<MemoryRegistration> registration;
};

void ReleaseShared(void* context, std::byte* /*block*/) noexcept {
  delete static_cast<std::shared_ptr<Buffer>*>(context);
}

// A Buffer over `bytes`, inside `owner`, that keeps `owner` alive without
// the GIL.
Buffer ShareOf(const std::shared_ptr<Buffer>& owner,
               std::span<const std::byte> bytes) {
  auto* hold = new std::shared_ptr<Buffer>(owner);
  return Buffer(const_cast<std::byte*>(bytes.data()), bytes.size(),
                &ReleaseShared, hold);
}

// The attachment `object` names, as a Buffer: no copy for the library's own
// memory, one counted copy for anything else.
Buffer AttachmentOf(py::handle object) {
  if (object.is_none()) return Buffer();
  if (py::isinstance<Received>(object)) {
    const auto& received = object.cast<const Received&>();
    return ShareOf(received.buffer, received.buffer->span());
  }
  Py_buffer view;
  if (PyObject_GetBuffer(object.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
    throw py::error_already_set();
  }
  const std::span<const std::byte> bytes(static_cast<std::byte*>(view.buf),
                                         static_cast<size_t>(view.len));
  Buffer buffer;
  if (bytes.empty()) {
    // Nothing to send.
  } else if (auto registration = MemoryRegistration::Find(bytes)) {
    buffer = registration->Slice(
        static_cast<size_t>(bytes.data() - registration->data()), bytes.size());
  } else if (view.obj != nullptr && PyMemoryView_Check(view.obj) &&
             PyMemoryView_GET_BUFFER(view.obj)->obj != nullptr &&
             py::isinstance<Received>(PyMemoryView_GET_BUFFER(view.obj)->obj)) {
    // A slice of a received attachment.
    const auto& received = py::handle(PyMemoryView_GET_BUFFER(view.obj)->obj)
                               .cast<const Received&>();
    buffer = ShareOf(received.buffer, bytes);
  } else {
    buffer = Buffer::CopyOf(bytes);
    g_copies.fetch_add(1, std::memory_order_relaxed);
    g_copied_bytes.fetch_add(bytes.size(), std::memory_order_relaxed);
  }
  PyBuffer_Release(&view);
  return buffer;
}

Buffer MessageOf(const py::bytes& message) {
  char* data;
  Py_ssize_t size;
  PyBytes_AsStringAndSize(message.ptr(), &data, &size);
  return Buffer::CopyOf(std::string_view(data, static_cast<size_t>(size)));
}

Payload PayloadOf(const py::bytes& message, py::handle attachment) {
  return Payload(MessageOf(message), AttachmentOf(attachment));
}

py::object AttachmentToPython(Buffer attachment) {
  if (attachment.empty()) return py::none();
  return py::cast(Received{std::make_shared<Buffer>(std::move(attachment))});
}

py::list MetadataToPython(const Metadata& metadata) {
  py::list list;
  for (const auto& [key, value] : metadata) {
    list.append(py::make_tuple(py::str(key), py::bytes(value)));
  }
  return list;
}

Metadata MetadataOf(py::handle pairs) {
  Metadata metadata;
  if (pairs.is_none()) return metadata;
  for (py::handle pair : pairs) {
    auto tuple = py::reinterpret_borrow<py::sequence>(pair);
    py::object value = tuple[1];
    std::string bytes = py::isinstance<py::bytes>(value)
                            ? value.cast<std::string>()
                            : py::str(value).cast<std::string>();
    metadata.Add(tuple[0].cast<std::string>(), std::move(bytes));
  }
  return metadata;
}

// ---- Options ----------------------------------------------------------------

std::optional<TlsOptions> TlsOf(const std::string& ca, const std::string& cert,
                                const std::string& key,
                                const std::string& server_name) {
  if (ca.empty() && cert.empty() && key.empty()) return std::nullopt;
  TlsOptions tls;
  tls.ca_file = ca;
  tls.cert_file = cert;
  tls.key_file = key;
  tls.server_name = server_name;
  return tls;
}

CallOptions CallOptionsOf(std::optional<double> timeout, py::handle metadata,
                          bool wait_for_ready) {
  CallOptions options;
  if (timeout) {
    options =
        CallOptions::WithTimeout(std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(*timeout)));
  }
  options.metadata = MetadataOf(metadata);
  options.wait_for_ready = wait_for_ready;
  return options;
}

// ---- Client -----------------------------------------------------------------

// A method's names and id, kept where the MethodRef's views can point.
class Method {
 public:
  Method(std::string service, std::string method, bool idempotent)
      : service_(std::move(service)),
        method_(std::move(method)),
        ref_(service_, method_, idempotent) {}
  const MethodRef& ref() const { return ref_; }

 private:
  const std::string service_;
  const std::string method_;
  const MethodRef ref_;
};

using Queue = std::shared_ptr<EventQueue>;

ResponseCallback DoneInto(Queue queue, uint64_t token,
                          std::shared_ptr<ResponseMetadata> metadata) {
  return [queue = std::move(queue), token, metadata = std::move(metadata)](
             const Status& status, Payload response) mutable {
    queue->Push(Event{token, EventKind::kDone, status,
                      status.ok() ? std::optional<Payload>(std::move(response))
                                  : std::nullopt,
                      std::move(metadata), nullptr});
  };
}

// A stream's Read and Write, as events.
StreamReadCallback ReadInto(Queue queue, uint64_t token) {
  return [queue = std::move(queue), token](const Status& status,
                                           std::optional<Payload> message) {
    queue->Push(Event{token, EventKind::kMessage, status, std::move(message),
                      nullptr, nullptr});
  };
}

StreamWriteCallback WrittenInto(Queue queue, uint64_t token) {
  return [queue = std::move(queue), token](const Status& status) {
    queue->Push(Event{token, EventKind::kWritten, status, std::nullopt, nullptr,
                      nullptr});
  };
}

class PyClientStream {
 public:
  PyClientStream(std::unique_ptr<ClientStream> stream,
                 std::shared_ptr<ResponseMetadata> metadata)
      : stream_(std::move(stream)), metadata_(std::move(metadata)) {}

  void Write(const Queue& queue, uint64_t token, const py::bytes& message,
             py::handle attachment) {
    Stream().Write(PayloadOf(message, attachment), WrittenInto(queue, token));
  }
  void WritesDone() { Stream().WritesDone(); }
  void Read(const Queue& queue, uint64_t token) {
    Stream().Read(ReadInto(queue, token));
  }
  void Finish(const Queue& queue, uint64_t token) {
    Stream().Finish(DoneInto(queue, token, metadata_));
  }
  void Cancel() {
    if (stream_) stream_->Cancel();
  }
  void Close() {
    py::gil_scoped_release release;
    stream_.reset();
  }

 private:
  ClientStream& Stream() {
    if (!stream_) throw std::runtime_error("the stream is closed");
    return *stream_;
  }
  std::unique_ptr<ClientStream> stream_;
  // The call's headers and trailers (CallOptions::response_metadata).
  const std::shared_ptr<ResponseMetadata> metadata_;
};

class PyChannel {
 public:
  PyChannel(std::string target, const std::string& tls_ca,
            const std::string& tls_cert, const std::string& tls_key,
            const std::string& tls_server_name, uint64_t max_payload_size) {
    ChannelOptions options;
    if (max_payload_size != 0) {
      options.max_request_size = max_payload_size;
      options.transport.max_payload_size = max_payload_size;
    }
    options.transport.tls = TlsOf(tls_ca, tls_cert, tls_key, tls_server_name);
    channel_ = std::make_shared<Channel>(std::move(target), std::move(options));
  }

  uint64_t Call(const Queue& queue, uint64_t token, const Method& method,
                const py::bytes& request, py::handle attachment,
                std::optional<double> timeout, py::handle metadata,
                bool want_metadata, bool wait_for_ready) {
    CallOptions options = CallOptionsOf(timeout, metadata, wait_for_ready);
    std::shared_ptr<ResponseMetadata> response_metadata;
    if (want_metadata) {
      response_metadata = std::make_shared<ResponseMetadata>();
      options.response_metadata = response_metadata;
    }
    return Get().Call(method.ref(), PayloadOf(request, attachment), options,
                      DoneInto(queue, token, std::move(response_metadata)));
  }

  // (code, message, body, attachment, headers, trailers), waiting with the
  // GIL released.
  py::tuple CallBlocking(const Method& method, const py::bytes& request,
                         py::handle attachment, std::optional<double> timeout,
                         py::handle metadata, bool wait_for_ready) {
    CallOptions options = CallOptionsOf(timeout, metadata, wait_for_ready);
    auto response_metadata = std::make_shared<ResponseMetadata>();
    options.response_metadata = response_metadata;
    Payload payload = PayloadOf(request, attachment);
    std::promise<std::pair<Status, Payload>> done;
    auto result = done.get_future();
    std::pair<Status, Payload> answer;
    {
      py::gil_scoped_release release;
      Get().Call(method.ref(), std::move(payload), options,
                 [&done](const Status& status, Payload response) {
                   done.set_value({status, std::move(response)});
                 });
      answer = result.get();
    }
    return py::make_tuple(
        static_cast<int>(answer.first.code()), answer.first.message(),
        py::bytes(answer.second.message.view()),
        AttachmentToPython(std::move(answer.second.attachment)),
        MetadataToPython(response_metadata->headers),
        MetadataToPython(response_metadata->trailers));
  }

  void Cancel(uint64_t call_id) { Get().Cancel(call_id); }

  PyClientStream OpenStream(const Method& method, int kind,
                            const py::bytes& request, py::handle attachment,
                            std::optional<double> timeout, py::handle metadata,
                            bool wait_for_ready) {
    CallOptions options = CallOptionsOf(timeout, metadata, wait_for_ready);
    auto response_metadata = std::make_shared<ResponseMetadata>();
    options.response_metadata = response_metadata;
    const auto stream_kind = static_cast<StreamKind>(kind);
    Payload payload = stream_kind == StreamKind::kServerStreaming
                          ? PayloadOf(request, attachment)
                          : Payload();
    return PyClientStream(Get().OpenStream(method.ref(), stream_kind, options,
                                           std::move(payload)),
                          std::move(response_metadata));
  }

  void Connect() { Get().Connect(); }
  bool ready() const {
    return channel_ && channel_->state() == ChannelState::kReady;
  }

  // Ends every outstanding call (CANCELLED) and lets the event loops go:
  // the last channel's close joins their threads.
  void Close() {
    py::gil_scoped_release release;
    channel_.reset();
  }

 private:
  Channel& Get() {
    if (!channel_) throw std::runtime_error("the channel is closed");
    return *channel_;
  }
  std::shared_ptr<Channel> channel_;
};

// ---- Server -----------------------------------------------------------------

class PyServerCall {
 public:
  explicit PyServerCall(std::shared_ptr<ServerCall> call)
      : call_(std::move(call)) {}
  const std::string& service() const { return call_->service(); }
  const std::string& method() const { return call_->method(); }
  py::bytes request() const { return py::bytes(call_->request().view()); }
  py::object TakeAttachment() {
    return AttachmentToPython(call_->TakeRequestAttachment());
  }
  std::optional<double> time_remaining() const {
    const auto deadline = call_->deadline();
    if (!deadline) return std::nullopt;
    return std::chrono::duration<double>(*deadline - Clock::now()).count();
  }
  // The authenticated peer: (subject, alternative names), or None.
  py::object peer() const {
    const PeerIdentity& identity = call_->peer_identity();
    if (!identity.authenticated()) return py::none();
    return py::make_tuple(identity.subject, identity.alt_names);
  }
  py::list metadata() const {
    return MetadataToPython(call_->request_metadata());
  }
  void AddHeader(std::string key, const std::string& value) {
    call_->response_headers().Add(std::move(key), value);
  }
  void AddTrailer(std::string key, const std::string& value) {
    call_->response_trailers().Add(std::move(key), value);
  }
  bool cancelled() const { return call_->IsCancelled(); }
  void OnCancel(const Queue& queue, uint64_t token) {
    call_->OnCancel([queue, token] {
      queue->Push(Event{token, EventKind::kCancelled, Status(), std::nullopt,
                        nullptr, nullptr});
    });
  }
  void Finish(int code, std::string message, const py::bytes& response,
              py::handle attachment) {
    const auto status_code = StatusCodeFromInt(code);
    const Status status(status_code.value_or(StatusCode::kUnknown),
                        std::move(message));
    Payload payload = status.ok() ? PayloadOf(response, attachment) : Payload();
    call_->Finish(status, std::move(payload));
  }
  void Read(const Queue& queue, uint64_t token) {
    call_->Read(ReadInto(queue, token));
  }
  void Write(const Queue& queue, uint64_t token, const py::bytes& message,
             py::handle attachment) {
    call_->Write(PayloadOf(message, attachment), WrittenInto(queue, token));
  }

 private:
  std::shared_ptr<ServerCall> call_;
};

// (token, kind, code, message, body | None, attachment | None, extra):
// extra is (headers, trailers) for a call's end, the ServerCall for a new
// server call, None otherwise.
py::list DrainToPython(EventQueue& queue) {
  std::vector<Event> events = queue.Drain();
  py::list out;
  for (Event& event : events) {
    py::object body = py::none();
    py::object attachment = py::none();
    if (event.payload) {
      body = py::bytes(event.payload->message.view());
      attachment = AttachmentToPython(std::move(event.payload->attachment));
    }
    py::object extra = py::none();
    if (event.metadata) {
      extra = py::make_tuple(MetadataToPython(event.metadata->headers),
                             MetadataToPython(event.metadata->trailers));
    } else if (event.call) {
      extra = py::cast(PyServerCall(std::move(event.call)));
    }
    out.append(py::make_tuple(event.token, static_cast<int>(event.kind),
                              static_cast<int>(event.status.code()),
                              py::str(event.status.message()), body, attachment,
                              extra));
  }
  return out;
}

class PyServer {
 public:
  PyServer(const std::string& tls_ca, const std::string& tls_cert,
           const std::string& tls_key, bool require_client_cert,
           uint64_t max_payload_size) {
    ServerOptions options;
    if (max_payload_size != 0) {
      options.max_response_size = max_payload_size;
      options.transport.max_payload_size = max_payload_size;
    }
    options.transport.tls = TlsOf(tls_ca, tls_cert, tls_key, "");
    if (options.transport.tls) {
      options.transport.tls->require_client_cert = require_client_cert;
    }
    server_ = std::make_unique<Server>(std::move(options));
  }

  // Before listen. Each call of the method becomes an event on `queue`.
  void AddMethod(const std::string& service, std::string method, int kind,
                 const Queue& queue, uint64_t token) {
    auto& entry = services_[service];
    if (!entry) entry = std::make_unique<Service>(service);
    MethodHandler handler = [queue, token](std::shared_ptr<ServerCall> call) {
      queue->Push(Event{token, EventKind::kIncoming, Status(), std::nullopt,
                        nullptr, std::move(call)});
    };
    const auto stream_kind = static_cast<StreamKind>(kind);
    if (stream_kind == StreamKind::kUnary) {
      entry->AddMethod(std::move(method), std::move(handler));
    } else {
      entry->AddStreamingMethod(std::move(method), stream_kind,
                                std::move(handler));
    }
  }

  std::string Listen(const std::string& uri) {
    for (auto& [name, service] : services_) {
      if (service) Get().RegisterService(std::move(service));
    }
    StatusOr<std::string> bound = [&] {
      py::gil_scoped_release release;
      return Get().Listen(uri);
    }();
    if (!bound.ok()) {
      throw std::runtime_error(bound.status().ToString());
    }
    return *bound;
  }

  void Shutdown(double grace_seconds) {
    py::gil_scoped_release release;
    if (server_) {
      server_->Shutdown(std::chrono::milliseconds(
          static_cast<int64_t>(grace_seconds * 1000)));
    }
  }

  void Close() {
    py::gil_scoped_release release;
    server_.reset();
  }

  // Every transport counter (include/rdmarpc/connection_stats.h), summed
  // over the server's connections, closed ones included: {name: count}.
  py::dict TransportCounters() {
    ConnectionStats sum;
    Get().ForEachTransport(
        [&sum](const std::string&, const Server::TransportTotals& totals) {
          sum.Add(totals.counters);
        });
    py::dict counters;
    for (const ConnectionCounter& counter : kConnectionCounters) {
      counters[counter.name] = (sum.*counter.member).load();
    }
    return counters;
  }

 private:
  Server& Get() {
    if (!server_) throw std::runtime_error("the server is closed");
    return *server_;
  }
  std::unique_ptr<Server> server_;
  std::map<std::string, std::unique_ptr<Service>> services_;
};

}  // namespace
}  // namespace rdmarpc::python

PYBIND11_MODULE(_rdmarpc, m) {
  using namespace rdmarpc::python;  // NOLINT(google-build-using-namespace)
  m.doc() = "rdmarpc's native half; use the rdmarpc package.";

  py::class_<EventQueue, std::shared_ptr<EventQueue>>(m, "EventQueue")
      .def(py::init<>())
      .def_property_readonly("fd", &EventQueue::fd)
      .def("drain", [](EventQueue& queue) { return DrainToPython(queue); });

  py::class_<Received>(m, "ReceivedBuffer", py::buffer_protocol(),
                       "A received attachment: a window on the memory it "
                       "landed in, never copied.")
      .def_buffer([](Received& received) {
        return py::buffer_info(
            received.buffer->data(), 1, "B",
            static_cast<py::ssize_t>(received.buffer->size()), false);
      })
      .def("__len__",
           [](const Received& received) { return received.buffer->size(); });

  py::class_<Memory>(m, "Memory", py::buffer_protocol(),
                     "Registered memory (rdmarpc.allocate): any view of it "
                     "is sent as an attachment from where it is.")
      .def_buffer([](Memory& memory) {
        return py::buffer_info(
            memory.registration->data(), 1, "B",
            static_cast<py::ssize_t>(memory.registration->size()), false);
      })
      .def("__len__",
           [](const Memory& memory) { return memory.registration->size(); });

  m.def(
      "allocate",
      [](size_t size) {
        auto registration = rdmarpc::MemoryRegistration::Allocate(size);
        if (!registration.ok()) {
          throw std::runtime_error(registration.status().ToString());
        }
        return Memory{std::move(*registration)};
      },
      py::arg("size"));
  m.def("copies",
        [] { return py::make_tuple(g_copies.load(), g_copied_bytes.load()); });

  py::class_<Method>(m, "Method")
      .def(py::init<std::string, std::string, bool>());

  py::class_<PyClientStream>(m, "ClientStream")
      .def("write", &PyClientStream::Write)
      .def("writes_done", &PyClientStream::WritesDone)
      .def("read", &PyClientStream::Read)
      .def("finish", &PyClientStream::Finish)
      .def("cancel", &PyClientStream::Cancel)
      .def("close", &PyClientStream::Close);

  py::class_<PyChannel>(m, "Channel")
      .def(py::init<std::string, std::string, std::string, std::string,
                    std::string, uint64_t>())
      .def("call", &PyChannel::Call)
      .def("call_blocking", &PyChannel::CallBlocking)
      .def("cancel", &PyChannel::Cancel)
      .def("open_stream", &PyChannel::OpenStream)
      .def("connect", &PyChannel::Connect)
      .def_property_readonly("ready", &PyChannel::ready)
      .def("close", &PyChannel::Close);

  py::class_<PyServerCall>(m, "ServerCall")
      .def_property_readonly("service", &PyServerCall::service)
      .def_property_readonly("method", &PyServerCall::method)
      .def("request", &PyServerCall::request)
      .def("take_attachment", &PyServerCall::TakeAttachment)
      .def("time_remaining", &PyServerCall::time_remaining)
      .def("peer", &PyServerCall::peer)
      .def("metadata", &PyServerCall::metadata)
      .def("add_header", &PyServerCall::AddHeader)
      .def("add_trailer", &PyServerCall::AddTrailer)
      .def("cancelled", &PyServerCall::cancelled)
      .def("on_cancel", &PyServerCall::OnCancel)
      .def("finish", &PyServerCall::Finish)
      .def("read", &PyServerCall::Read)
      .def("write", &PyServerCall::Write);

  py::class_<PyServer>(m, "Server")
      .def(py::init<std::string, std::string, std::string, bool, uint64_t>())
      .def("add_method", &PyServer::AddMethod)
      .def("listen", &PyServer::Listen)
      .def("shutdown", &PyServer::Shutdown)
      .def("transport_counters", &PyServer::TransportCounters)
      .def("close", &PyServer::Close);
}
