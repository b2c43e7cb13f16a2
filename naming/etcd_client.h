// EtcdClient: the few calls of etcd's v3 API that naming needs, spoken to
// etcd's HTTP/JSON gateway (POST /v3/...) with Boost.Beast, the bodies
// being protobuf's JSON mapping of etcd's own messages (naming/etcd.proto).
// No gRPC: etcd's gateway is part of every etcd since 3.3.
//
//   auto etcd = EtcdClient::Create(loop.get_executor(), "10.0.0.5:2379");
//   (*etcd)->Range("/services/kv/", [](StatusOr<etcd::RangeResponse> r) {...});
//
// An etcd cluster has several members: the client is given several
// "host:port"s and sends each request to the member that last answered,
// moving on to the next when one cannot be reached (connect refused, no
// answer within request_timeout). A request fails UNAVAILABLE only once
// every member has failed it. An answer that is an error (a lease not
// found, say) is not retried: it comes back with etcd's gRPC code, which
// is rdmarpc's (include/rdmarpc/status.h).
//
// With EtcdOptions::tls (or "https://" endpoints) every member is reached
// over TLS, its certificate checked; with EtcdOptions::user the client
// authenticates as that user and sends etcd's token with each request.
//
// Threads: every callback runs on the client's executor. The methods may be
// called from any thread.
#ifndef RDMARPC_NAMING_ETCD_CLIENT_H_
#define RDMARPC_NAMING_ETCD_CLIENT_H_

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "naming/etcd.pb.h"
#include "rdmarpc/naming_options.h"
#include "rdmarpc/status.h"
#include "rdmarpc/unique_function.h"

namespace rdmarpc::transport::tls {
class TlsContext;
}

namespace rdmarpc::naming {

// The end of the range that holds every key starting with `prefix`: the
// prefix with its last byte that is not 0xff incremented ("\0" for all keys).
std::string PrefixRangeEnd(std::string_view prefix);

class EtcdClient : public std::enable_shared_from_this<EtcdClient> {
 public:
  template <typename Response>
  using Callback = UniqueFunction<void(StatusOr<Response>)>;

  // `endpoints`: "host:port[,host:port...]", members of one etcd cluster
  // (an "http://" or "https://" in front of each is accepted).
  // INVALID_ARGUMENT if empty or malformed, if "http://" meets TLS, or if
  // the TLS files do not load.
  static StatusOr<std::shared_ptr<EtcdClient>> Create(
      boost::asio::any_io_executor executor, std::string_view endpoints,
      EtcdOptions options = {});

  // Every key under `prefix`, with the revision they were read at.
  void Range(std::string prefix, Callback<etcd::RangeResponse> done);
  // Puts `key` = `value`, attached to `lease` unless it is 0.
  void Put(std::string key, std::string value, int64_t lease,
           Callback<etcd::PutResponse> done);
  void Delete(std::string key, Callback<etcd::DeleteRangeResponse> done);
  void GrantLease(int64_t ttl_seconds, Callback<etcd::LeaseGrantResponse> done);
  // Renews `lease` once. A lease that has expired answers with TTL <= 0.
  void KeepAlive(int64_t lease, Callback<etcd::LeaseKeepAliveResponse> done);
  // Ends `lease` now: the keys attached to it are deleted.
  void RevokeLease(int64_t lease, Callback<etcd::LeaseRevokeResponse> done);

  // A watch on every key under a prefix, from WatchPrefix. Destroying it
  // (or Cancel) closes it; no callback runs once Cancel has returned on the
  // executor's thread.
  class Watch {
   public:
    virtual ~Watch() = default;
    virtual void Cancel() = 0;
  };
  // Watches every key under `prefix` from `start_revision` (0: from now):
  // `on_response` runs for each response etcd streams (the first says
  // `created`). The watch has ended when it gets an error (the connection
  // lost: UNAVAILABLE) or a response that is `canceled` (a compacted
  // start_revision: `compact_revision` is set); nothing follows either.
  using WatchCallback = std::function<void(StatusOr<etcd::WatchResponse>)>;
  std::unique_ptr<Watch> WatchPrefix(std::string prefix, int64_t start_revision,
                                     const WatchCallback& on_response);

  const std::vector<std::string>& endpoints() const { return endpoints_; }

  // For the implementation (naming/etcd_client.cc).
  EtcdClient(boost::asio::any_io_executor executor,
             std::vector<std::string> endpoints, EtcdOptions options,
             std::shared_ptr<transport::tls::TlsContext> tls);
  ~EtcdClient();

 private:
  // POSTs `body` to `path` with the token (if a user is configured; a
  // refused one is renewed once when may_renew_token); `done` gets the
  // response body of a 200, else the gateway's error.
  void Post(std::string path, std::string body,
            UniqueFunction<void(StatusOr<std::string>)> done,
            bool may_renew_token = true);
  // One POST, trying each member in turn.
  void Send(std::string path, std::string body, std::string token,
            UniqueFunction<void(StatusOr<std::string>)> done);
  // The token etcd gave, asked for first if there is none.
  void WithToken(UniqueFunction<void(StatusOr<std::string>)> then);
  // Forgets `token` if it is still the one held.
  void ForgetToken(const std::string& token);
  template <typename Response, typename Request>
  void Unary(const std::string& path, const Request& request,
             Callback<Response> done);

  boost::asio::any_io_executor executor_;
  const std::vector<std::string> endpoints_;  // "host:port"
  const EtcdOptions options_;
  const std::shared_ptr<transport::tls::TlsContext> tls_;  // Null: no TLS.
  std::mutex token_mu_;
  std::string token_;  // etcd's token for options_.user, once it gave one.
  // The member that answered last: where the next request goes first.
  std::shared_ptr<std::atomic<size_t>> preferred_;
};

}  // namespace rdmarpc::naming

#endif  // RDMARPC_NAMING_ETCD_CLIENT_H_
