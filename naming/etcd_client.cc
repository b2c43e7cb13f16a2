// EtcdClient (naming/etcd_client.h): one HTTP/1.1 POST per request over
// Boost.Beast, a new TCP (or TLS) connection each (requests are rare: a
// lease renewed every few seconds, a list on a watch's restart), failing
// over from member to member; a watch is one POST whose response never
// ends. With a user, a token from /v3/auth/authenticate goes with each.
#include "naming/etcd_client.h"

#include <atomic>
#include <boost/asio/dispatch.hpp>

#include "naming/etcd_exchange.h"
#include "transport/tls/tls.h"
#include "transport/uri.h"

namespace rdmarpc::naming {

namespace asio = boost::asio;

std::string PrefixRangeEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // Every key.
}

namespace {

struct Endpoints {
  std::vector<std::string> hosts;  // "host:port" each.
  bool http = false;               // One was written "http://".
  bool https = false;              // One was written "https://".
};

// Splits "h1:p1,http://h2:p2" into "h1:p1", "h2:p2", checking each.
StatusOr<Endpoints> ParseEndpoints(std::string_view list) {
  Endpoints endpoints;
  std::vector<std::string>& out = endpoints.hosts;
  while (!list.empty()) {
    const auto comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view()
                                           : list.substr(comma + 1);
    if (item.starts_with("http://")) {
      item.remove_prefix(7);
      endpoints.http = true;
    } else if (item.starts_with("https://")) {
      item.remove_prefix(8);
      endpoints.https = true;
    }
    StatusOr<transport::Uri> uri =
        transport::ParseUri("tcp://" + std::string(item));
    if (!uri.ok() || uri->port == 0 || !uri->params.empty()) {
      return Status(
          StatusCode::kInvalidArgument,
          "etcd endpoint \"" + std::string(item) + "\" is not host:port");
    }
    out.emplace_back(item);
  }
  if (out.empty()) {
    return Status(StatusCode::kInvalidArgument, "no etcd endpoint given");
  }
  return endpoints;
}

}  // namespace

EtcdClient::EtcdClient(asio::any_io_executor executor,
                       std::vector<std::string> endpoints, EtcdOptions options,
                       std::shared_ptr<transport::tls::TlsContext> tls)
    : executor_(std::move(executor)),
      endpoints_(std::move(endpoints)),
      options_(std::move(options)),
      tls_(std::move(tls)),
      preferred_(std::make_shared<std::atomic<size_t>>(0)) {}

EtcdClient::~EtcdClient() = default;

StatusOr<std::shared_ptr<EtcdClient>> EtcdClient::Create(
    asio::any_io_executor executor, std::string_view endpoints,
    EtcdOptions options) {
  StatusOr<Endpoints> parsed = ParseEndpoints(endpoints);
  if (!parsed.ok()) return parsed.status();
  std::shared_ptr<transport::tls::TlsContext> tls;
  if (parsed->https || !options.tls.ca_file.empty()) {
    if (parsed->http) {
      return Status(StatusCode::kInvalidArgument,
                    "etcd endpoints \"" + std::string(endpoints) +
                        "\" mix http:// with TLS: none is reached in "
                        "plaintext once TLS is configured");
    }
    if (options.tls.ca_file.empty()) {
      return Status(StatusCode::kInvalidArgument,
                    "etcd over https:// needs EtcdOptions::tls.ca_file, the "
                    "CA its members' certificates end in");
    }
    StatusOr<std::shared_ptr<transport::tls::TlsContext>> context =
        transport::tls::TlsContext::Shared(
            options.tls, transport::tls::TlsContext::Role::kClient);
    if (!context.ok()) return context.status();
    tls = std::move(*context);
  }
  if (options.user.empty() && !options.password.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  "EtcdOptions::password is set without a user");
  }
  return std::make_shared<EtcdClient>(std::move(executor),
                                      std::move(parsed->hosts),
                                      std::move(options), std::move(tls));
}

void EtcdClient::Send(std::string path, std::string body, std::string token,
                      UniqueFunction<void(StatusOr<std::string>)> done) {
  auto exchange = std::make_shared<EtcdExchange>(executor_, endpoints_,
                                                 options_, preferred_, tls_);
  exchange->path = std::move(path);
  exchange->request_body = std::move(body);
  exchange->token = std::move(token);
  // The exchange holds the client: its endpoints must outlive it.
  exchange->done = [client = shared_from_this(), done = std::move(done)](
                       StatusOr<std::string> r) mutable { done(std::move(r)); };
  exchange->Start();
}

void EtcdClient::Post(std::string path, std::string body,
                      UniqueFunction<void(StatusOr<std::string>)> done,
                      bool may_renew_token) {
  if (options_.user.empty()) {
    return Send(std::move(path), std::move(body), {}, std::move(done));
  }
  WithToken([self = shared_from_this(), path = std::move(path),
             body = std::move(body), done = std::move(done),
             may_renew_token](StatusOr<std::string> token) mutable {
    if (!token.ok()) return done(token.status());
    std::string used = *token;
    self->Send(
        path, body, std::move(*token),
        [self, path, body, done = std::move(done), may_renew_token,
         used = std::move(used)](StatusOr<std::string> r) mutable {
          // A token etcd no longer takes (it expired, or etcd
          // restarted): a new one, once.
          if (!r.ok() && r.status().code() == StatusCode::kUnauthenticated) {
            self->ForgetToken(used);
            if (may_renew_token) {
              return self->Post(std::move(path), std::move(body),
                                std::move(done), false);
            }
          }
          done(std::move(r));
        });
  });
}

void EtcdClient::WithToken(UniqueFunction<void(StatusOr<std::string>)> then) {
  {
    std::unique_lock lock(token_mu_);
    if (!token_.empty()) {
      std::string token = token_;
      lock.unlock();
      return then(std::move(token));
    }
  }
  etcd::AuthenticateRequest request;
  request.set_name(options_.user);
  request.set_password(options_.password);
  Send("/v3/auth/authenticate", ToJson(request), {},
       [self = shared_from_this(),
        then = std::move(then)](StatusOr<std::string> body) mutable {
         etcd::AuthenticateResponse response;
         Status status = body.ok() ? FromJson(*body, &response) : body.status();
         if (status.ok() && response.token().empty()) {
           status = Status(StatusCode::kInternal, "etcd sent no token");
         }
         if (!status.ok()) {
           return then(Status(status.code(), "etcd did not authenticate \"" +
                                                 self->options_.user +
                                                 "\": " + status.message()));
         }
         {
           std::lock_guard lock(self->token_mu_);
           self->token_ = response.token();
         }
         then(std::move(*response.mutable_token()));
       });
}

void EtcdClient::ForgetToken(const std::string& token) {
  std::lock_guard lock(token_mu_);
  if (token_ == token) token_.clear();
}

template <typename Response, typename Request>
void EtcdClient::Unary(const std::string& path, const Request& request,
                       Callback<Response> done) {
  Post(path, ToJson(request),
       [done = std::move(done)](StatusOr<std::string> body) mutable {
         if (!body.ok()) return done(body.status());
         Response response;
         if (Status parsed = FromJson(*body, &response); !parsed.ok()) {
           return done(parsed);
         }
         done(std::move(response));
       });
}

void EtcdClient::Range(std::string prefix, Callback<etcd::RangeResponse> done) {
  etcd::RangeRequest request;
  request.set_range_end(PrefixRangeEnd(prefix));
  request.set_key(std::move(prefix));
  Unary<etcd::RangeResponse>("/v3/kv/range", request, std::move(done));
}

void EtcdClient::Put(std::string key, std::string value, int64_t lease,
                     Callback<etcd::PutResponse> done) {
  etcd::PutRequest request;
  request.set_key(std::move(key));
  request.set_value(std::move(value));
  request.set_lease(lease);
  Unary<etcd::PutResponse>("/v3/kv/put", request, std::move(done));
}

void EtcdClient::Delete(std::string key,
                        Callback<etcd::DeleteRangeResponse> done) {
  etcd::DeleteRangeRequest request;
  request.set_key(std::move(key));
  Unary<etcd::DeleteRangeResponse>("/v3/kv/deleterange", request,
                                   std::move(done));
}

void EtcdClient::GrantLease(int64_t ttl_seconds,
                            Callback<etcd::LeaseGrantResponse> done) {
  etcd::LeaseGrantRequest request;
  request.set_ttl(ttl_seconds);
  Unary<etcd::LeaseGrantResponse>("/v3/lease/grant", request, std::move(done));
}

void EtcdClient::KeepAlive(int64_t lease,
                           Callback<etcd::LeaseKeepAliveResponse> done) {
  etcd::LeaseKeepAliveRequest request;
  request.set_id(lease);
  // A gRPC stream behind the gateway: its one answer is {"result": ...}.
  Unary<etcd::KeepAliveStreamLine>(
      "/v3/lease/keepalive", request,
      [done =
           std::move(done)](StatusOr<etcd::KeepAliveStreamLine> line) mutable {
        if (!line.ok()) return done(line.status());
        if (line->has_error()) {
          return done(GatewayStatus(200, ToJson(line->error())));
        }
        done(std::move(*line->mutable_result()));
      });
}

void EtcdClient::RevokeLease(int64_t lease,
                             Callback<etcd::LeaseRevokeResponse> done) {
  etcd::LeaseRevokeRequest request;
  request.set_id(lease);
  Unary<etcd::LeaseRevokeResponse>("/v3/kv/lease/revoke", request,
                                   std::move(done));
}

namespace {
class WatchHandle final : public EtcdClient::Watch {
 public:
  explicit WatchHandle(std::shared_ptr<EtcdExchange> exchange)
      : exchange_(std::move(exchange)) {}
  ~WatchHandle() override { Cancel(); }
  void Cancel() override;

 private:
  std::shared_ptr<EtcdExchange> exchange_;
};
void WatchHandle::Cancel() { exchange_->Cancel(); }
}  // namespace

std::unique_ptr<EtcdClient::Watch> EtcdClient::WatchPrefix(
    std::string prefix, int64_t start_revision,
    const WatchCallback& on_response) {
  etcd::WatchRequest request;
  etcd::WatchCreateRequest& create = *request.mutable_create_request();
  create.set_range_end(PrefixRangeEnd(prefix));
  create.set_key(std::move(prefix));
  create.set_start_revision(start_revision);
  auto exchange = std::make_shared<EtcdExchange>(executor_, endpoints_,
                                                 options_, preferred_, tls_);
  exchange->path = "/v3/watch";
  exchange->request_body = ToJson(request);
  // The token the watch was created with, set before it starts: one etcd
  // refuses is forgotten, so that the watch made next gets a new one.
  auto token = std::make_shared<std::string>();
  exchange->on_line = [on_response, token,
                       client = weak_from_this()](std::string_view text) {
    etcd::WatchStreamLine line;
    Status parsed = FromJson(text, &line);
    if (parsed.ok() && line.has_error()) {
      parsed = GatewayStatus(200, ToJson(line.error()));
    }
    if (!parsed.ok()) {
      if (auto self = client.lock();
          self && parsed.code() == StatusCode::kUnauthenticated) {
        self->ForgetToken(*token);
      }
      on_response(parsed);
      return false;
    }
    const bool canceled = line.result().canceled();
    on_response(std::move(*line.mutable_result()));
    return !canceled;
  };
  exchange->done = [client = shared_from_this(), on_response,
                    token](const StatusOr<std::string>& end) {
    if (!end.ok() && end.status().code() == StatusCode::kUnauthenticated) {
      client->ForgetToken(*token);
    }
    on_response(end.ok() ? Status(StatusCode::kUnavailable, "watch ended")
                         : end.status());
  };
  if (options_.user.empty()) {
    exchange->Start();
  } else {
    WithToken([exchange, token](StatusOr<std::string> got) {
      if (!got.ok()) return exchange->Fail(got.status());
      *token = *got;
      exchange->token = std::move(*got);
      exchange->Start();
    });
  }
  return std::make_unique<WatchHandle>(std::move(exchange));
}

}  // namespace rdmarpc::naming
