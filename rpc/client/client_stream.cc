// ClientStream (include/rdmarpc/channel.h): a streaming call's client side.
#include "rpc/client/client_stream_state.h"
#include "rpc/wire/wire_codec.h"

namespace rdmarpc::rpc {

void ClientStreamState::OnMessage(Payload message) {
  std::unique_lock lock(mu);
  if (ended) return;
  if (!ServerSends(kind) || !receive.Admit(message.size())) {
    lock.unlock();
    if (auto channel = host.lock()) {
      channel->EndCall(
          id, Status(StatusCode::kResourceExhausted,
                     "stream window exceeded: the server sent a message the "
                     "client had not made room for"));
    }
    return;
  }
  if (!reader) {
    inbox.push_back(std::move(message));
    return;
  }
  StreamReadCallback done = std::move(reader);
  if (const auto room = receive.Consume(message.size())) {
    Send(MakeWindowFrame(id, room->first, room->second));
  }
  lock.unlock();
  Post([done = std::move(done), message = std::move(message)]() mutable {
    done(Status(), std::move(message));
  });
}

void ClientStreamState::OnWindow(uint64_t messages, uint64_t bytes) {
  StreamWriteCallback done;
  {
    std::lock_guard lock(mu);
    send.Open(messages, bytes);
    if (ended || !pending || !send.HasRoom()) return;
    send.Take(pending->size());
    Send(MakeMessageFrame(id, std::move(*pending)));
    pending.reset();
    if (writes_done && !half_closed) {
      half_closed = true;
      Send(MakeHalfCloseFrame(id));
    }
    done = std::move(writer);
  }
  Post([done = std::move(done)]() mutable { done(Status()); });
}

void ClientStreamState::OnEnd(const Status& end, Payload final_response) {
  StreamReadCallback waiting_reader;
  StreamWriteCallback waiting_writer;
  ResponseCallback waiting_finisher;
  {
    std::lock_guard lock(mu);
    ended = true;
    status = end;
    response = std::move(final_response);
    pending.reset();
    waiting_writer = std::move(writer);
    // Messages that came before the end are still read first.
    if (inbox.empty()) waiting_reader = std::move(reader);
    waiting_finisher = std::move(finisher);
  }
  if (auto channel = host.lock()) channel->ForgetStream(id);
  // Already where the channel runs callbacks: these run here, each whatever
  // the one before it throws.
  if (waiting_writer) {
    const Status why = end.ok() ? Status(StatusCode::kCancelled,
                                         "the call ended before the message "
                                         "went")
                                : end;
    auto run = [&] { waiting_writer(why); };
    InvokeGuarded(run);
  }
  if (waiting_reader) {
    auto run = [&] { waiting_reader(end, std::nullopt); };
    InvokeGuarded(run);
  }
  if (waiting_finisher) {
    Payload out;
    {
      std::lock_guard lock(mu);
      out = std::move(response);
    }
    InvokeCallback(waiting_finisher, end, std::move(out));
  }
}

}  // namespace rdmarpc::rpc

namespace rdmarpc {

ClientStream::ClientStream(std::shared_ptr<rpc::ClientStreamState> state)
    : state_(std::move(state)) {}

ClientStream::~ClientStream() {
  bool ended;
  {
    std::lock_guard lock(state_->mu);
    ended = state_->ended;
  }
  if (!ended) Cancel();
}

void ClientStream::Write(Payload message, StreamWriteCallback done) {
  rpc::ClientStreamState& state = *state_;
  std::unique_lock lock(state.mu);
  Status refused;
  if (!ClientSends(state.kind)) {
    refused = Status(StatusCode::kFailedPrecondition,
                     "Write on a call whose client sends no stream");
  } else if (state.ended) {
    refused = state.status.ok()
                  ? Status(StatusCode::kCancelled, "the call has ended")
                  : state.status;
  } else if (state.writes_done) {
    refused = Status(StatusCode::kFailedPrecondition, "Write after WritesDone");
  } else if (state.writer) {
    refused = Status(StatusCode::kFailedPrecondition,
                     "Write while another Write is outstanding");
  }
  if (refused.ok() && !state.send.HasRoom()) {
    state.pending = std::move(message);  // Until the server's WINDOW.
    state.writer = std::move(done);
    return;
  }
  if (refused.ok()) {
    state.send.Take(message.size());
    // Under mu: messages leave in the order written.
    if (!state.Send(rpc::MakeMessageFrame(state.id, std::move(message)))) {
      refused = Status(StatusCode::kCancelled, "the call has ended");
    }
  }
  lock.unlock();
  state.Post([done = std::move(done), refused]() mutable { done(refused); });
}

void ClientStream::WritesDone() {
  std::lock_guard lock(state_->mu);
  if (!ClientSends(state_->kind) || state_->writes_done || state_->ended) {
    return;
  }
  state_->writes_done = true;
  if (state_->pending) return;  // Sent after it (OnWindow).
  state_->half_closed = true;
  state_->Send(rpc::MakeHalfCloseFrame(state_->id));
}

void ClientStream::Read(StreamReadCallback done) {
  rpc::ClientStreamState& state = *state_;
  std::unique_lock lock(state.mu);
  Status refused;
  if (!ServerSends(state.kind)) {
    refused = Status(StatusCode::kFailedPrecondition,
                     "Read on a call whose server sends no stream");
  } else if (state.reader) {
    refused = Status(StatusCode::kFailedPrecondition,
                     "Read while another Read is outstanding");
  }
  if (!refused.ok()) {
    lock.unlock();
    return state.Post([done = std::move(done), refused]() mutable {
      done(refused, std::nullopt);
    });
  }
  if (state.inbox.empty()) {
    if (!state.ended) {
      state.reader = std::move(done);
      return;
    }
    const Status end = state.status;
    lock.unlock();
    return state.Post(
        [done = std::move(done), end]() mutable { done(end, std::nullopt); });
  }
  Payload message = std::move(state.inbox.front());
  state.inbox.pop_front();
  if (const auto room = state.receive.Consume(message.size());
      room && !state.ended) {
    state.Send(rpc::MakeWindowFrame(state.id, room->first, room->second));
  }
  lock.unlock();
  state.Post([done = std::move(done), message = std::move(message)]() mutable {
    done(Status(), std::move(message));
  });
}

void ClientStream::Finish(ResponseCallback done) {
  std::unique_lock lock(state_->mu);
  if (state_->finished) {
    lock.unlock();
    return state_->Post([done = std::move(done)]() mutable {
      done(Status(StatusCode::kFailedPrecondition, "Finish called twice"),
           Payload());
    });
  }
  state_->finished = true;
  if (!state_->ended) {
    state_->finisher = std::move(done);
    return;
  }
  Status end = state_->status;
  Payload response = std::move(state_->response);
  lock.unlock();
  state_->Post(
      [done = std::move(done), end, response = std::move(response)]() mutable {
        done(end, std::move(response));
      });
}

const Metadata& ClientStream::response_headers() const {
  return state_->response_metadata->headers;
}
const Metadata& ClientStream::response_trailers() const {
  return state_->response_metadata->trailers;
}

void ClientStream::Cancel() {
  if (auto channel = state_->host.lock()) {
    channel->EndCall(state_->id, Status(StatusCode::kCancelled,
                                        "call cancelled by the client"));
  }
}

}  // namespace rdmarpc
