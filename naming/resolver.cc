// MakeResolver (naming/resolver.h): target parsing, and list://.
#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>

#include "naming/resolver_internal.h"
#include "transport/uri.h"

namespace rdmarpc::naming {

namespace asio = boost::asio;

void Normalize(std::vector<std::string>& endpoints) {
  std::sort(endpoints.begin(), endpoints.end());
  endpoints.erase(std::unique(endpoints.begin(), endpoints.end()),
                  endpoints.end());
}

StatusOr<std::string> EndpointUri(std::string_view item,
                                  std::string_view default_scheme) {
  std::string text(item);
  if (text.find("://") == std::string::npos) {
    text = std::string(default_scheme) + "://" + text;
  }
  StatusOr<transport::Uri> uri = transport::ParseUri(text);
  if (!uri.ok() || uri->port == 0) {
    return Status(StatusCode::kInvalidArgument,
                  "endpoint \"" + std::string(item) +
                      "\" is not host:port or a transport URI" +
                      (uri.ok() ? "" : ": " + uri.status().message()));
  }
  return text;
}

bool IsClusterTarget(std::string_view target) {
  return target.starts_with("list://") || target.starts_with("dns://") ||
         target.starts_with("etcd://");
}

StatusOr<EtcdTarget> ParseEtcdTarget(std::string_view target) {
  if (!target.starts_with("etcd://")) {
    return Status(StatusCode::kInvalidArgument,
                  "\"" + std::string(target) + "\" is not an etcd:// target");
  }
  target.remove_prefix(7);
  const auto slash = target.find('/');
  EtcdTarget out;
  out.endpoints = std::string(target.substr(0, slash));
  if (slash != std::string_view::npos) {
    out.prefix = std::string(target.substr(slash));
  }
  while (!out.prefix.empty() && out.prefix.back() == '/') out.prefix.pop_back();
  if (out.endpoints.empty() || out.prefix.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  "an etcd target is etcd://host:port[,host:port...]/prefix");
  }
  return out;
}

std::string RegistrationKey(std::string_view prefix, std::string_view uri) {
  return std::string(prefix) + "/" + std::string(uri);
}

namespace {

// list://: the set given, once.
class ListResolver final : public Resolver {
 public:
  ListResolver(std::vector<std::string> endpoints,
               asio::any_io_executor executor)
      : endpoints_(std::move(endpoints)), executor_(std::move(executor)) {}

  void Start(Update update) override {
    asio::post(executor_, [endpoints = endpoints_, update = std::move(update),
                           stopped = stopped_] {
      if (!stopped->load()) update(endpoints);
    });
  }
  void Stop() override { stopped_->store(true); }

 private:
  const std::vector<std::string> endpoints_;
  asio::any_io_executor executor_;
  std::shared_ptr<std::atomic<bool>> stopped_ =
      std::make_shared<std::atomic<bool>>(false);
};

}  // namespace

std::unique_ptr<Resolver> MakeListResolver(std::vector<std::string> endpoints,
                                           asio::any_io_executor executor) {
  return std::make_unique<ListResolver>(std::move(endpoints),
                                        std::move(executor));
}

StatusOr<std::unique_ptr<Resolver>> MakeResolver(
    std::string_view target, asio::any_io_executor executor,
    const ResolverOptions& options) {
  if (target.starts_with("list://")) {
    std::string_view list = target.substr(7);
    std::vector<std::string> endpoints;
    while (!list.empty()) {
      const auto comma = list.find(',');
      StatusOr<std::string> uri =
          EndpointUri(list.substr(0, comma), options.default_scheme);
      if (!uri.ok()) return uri.status();
      endpoints.push_back(std::move(*uri));
      list = comma == std::string_view::npos ? std::string_view()
                                             : list.substr(comma + 1);
    }
    if (endpoints.empty()) {
      return Status(StatusCode::kInvalidArgument, "list:// names no endpoint");
    }
    Normalize(endpoints);
    return MakeListResolver(std::move(endpoints), std::move(executor));
  }
  if (target.starts_with("dns://")) {
    return MakeDnsResolver(target, executor, options);
  }
  if (target.starts_with("etcd://")) {
    StatusOr<EtcdTarget> parsed = ParseEtcdTarget(target);
    if (!parsed.ok()) return parsed.status();
    StatusOr<std::shared_ptr<EtcdClient>> etcd =
        EtcdClient::Create(executor, parsed->endpoints, options.etcd);
    if (!etcd.ok()) return etcd.status();
    return MakeEtcdResolver(std::move(*etcd), std::move(parsed->prefix),
                            executor, options);
  }
  return Status(StatusCode::kInvalidArgument,
                "\"" + std::string(target) +
                    "\" is not a cluster target (list://, dns://, etcd://)");
}

}  // namespace rdmarpc::naming
