// The health service (include/rdmarpc/health.h).
#include "rdmarpc/health.h"

#include <map>
#include <mutex>
#include <vector>

#include "proto/health.rdmarpc.h"

namespace rdmarpc {

namespace {

using health::v1::Health;
using health::v1::HealthCheckRequest;
using health::v1::HealthCheckResponse;
using Stream = TypedServerStream<HealthCheckRequest, HealthCheckResponse>;

class HealthService final : public Health::Service, public HealthStatus {
 public:
  explicit HealthService(const Server& server) {
    statuses_[""] = HealthCheckResponse::SERVING;
    for (const rpc::Service* service : server.services()) {
      statuses_[service->name()] = HealthCheckResponse::SERVING;
    }
    statuses_[Health::kServiceName] = HealthCheckResponse::SERVING;
  }

  void Check(std::shared_ptr<TypedCall<HealthCheckRequest, HealthCheckResponse>>
                 call) override {
    std::lock_guard lock(mu_);
    const auto it = statuses_.find(call->request().service());
    if (it == statuses_.end()) {
      return call->Finish(
          Status(StatusCode::kNotFound, "no health status for service \"" +
                                            call->request().service() + "\""));
    }
    call->response().set_status(it->second);
    call->Finish();
  }

  void Watch(std::shared_ptr<Stream> stream) override {
    auto watcher = std::make_shared<Watcher>();
    watcher->stream = stream;
    watcher->service = stream->request().service();
    {
      std::lock_guard lock(mu_);
      std::erase_if(watchers_, [](const auto& weak) { return weak.expired(); });
      watchers_.push_back(watcher);
    }
    stream->OnCancel([watcher] {
      std::lock_guard lock(watcher->mu);
      watcher->ended = true;
    });
    Send(watcher);
  }

  void Set(std::string_view service, ServingStatus status) override {
    std::vector<std::shared_ptr<Watcher>> watching;
    {
      std::lock_guard lock(mu_);
      statuses_[std::string(service)] = status;
      for (const auto& weak : watchers_) {
        if (auto watcher = weak.lock();
            watcher && watcher->service == service) {
          watching.push_back(std::move(watcher));
        }
      }
    }
    for (const auto& watcher : watching) Send(watcher);
  }

  void Shutdown() override {
    std::vector<std::string> services;
    {
      std::lock_guard lock(mu_);
      for (const auto& [name, status] : statuses_) services.push_back(name);
    }
    for (const auto& name : services) {
      Set(name, HealthCheckResponse::NOT_SERVING);
    }
  }

 private:
  // One Watch call: at most one write in flight; the latest status goes
  // when it completes, if it differs from the one sent.
  struct Watcher {
    std::mutex mu;
    std::shared_ptr<Stream> stream;
    std::string service;
    bool writing = false;
    bool ended = false;
    int sent = -1;
  };

  ServingStatus StatusOf(const std::string& service) {
    std::lock_guard lock(mu_);
    const auto it = statuses_.find(service);
    return it == statuses_.end() ? HealthCheckResponse::SERVICE_UNKNOWN
                                 : it->second;
  }

  void Send(const std::shared_ptr<Watcher>& watcher) {
    const ServingStatus status = StatusOf(watcher->service);
    {
      std::lock_guard lock(watcher->mu);
      if (watcher->ended || watcher->writing || watcher->sent == status) {
        return;
      }
      watcher->writing = true;
      watcher->sent = status;
    }
    HealthCheckResponse response;
    response.set_status(status);
    watcher->stream->async_Write(
        response, [this, watcher](const Status& written) {
          {
            std::lock_guard lock(watcher->mu);
            watcher->writing = false;
            if (!written.ok()) {
              watcher->ended = true;
              return;
            }
          }
          Send(watcher);  // A change while this one was on its way.
        });
  }

  std::mutex mu_;
  std::map<std::string, ServingStatus, std::less<>> statuses_;
  std::vector<std::weak_ptr<Watcher>> watchers_;
};

}  // namespace

HealthStatus* EnableHealth(Server& server) {
  auto service = std::make_unique<HealthService>(server);
  HealthService* status = service.get();
  server.OnShutdown([status] { status->Shutdown(); });
  server.RegisterService(std::move(service));
  return status;
}

}  // namespace rdmarpc
