#include "secrets/egress_broker.h"

#include "secrets/sandbox_ca.h"

namespace airlock::secrets {
namespace {

class EgressBroker : public egress::RequestBroker {
 public:
  explicit EgressBroker(std::shared_ptr<Broker> b) : b_(std::move(b)) {}
  bool Intercepts(const std::string& sandbox, const std::string& host) override {
    return b_->Intercepts(sandbox, host);
  }
  StatusOr<egress::LeafCertificate> LeafFor(const std::string& sandbox, const std::string& host) override {
    auto ca = b_->CaFor(sandbox);
    if (!ca) return NotFound("sandbox " + sandbox + " has no CA");
    ASSIGN_OR_RETURN(auto leaf, ca->LeafFor(host));
    return egress::LeafCertificate{leaf.cert_pem, leaf.key_pem};
  }
  std::vector<std::string> Substitute(const std::string& sandbox, const std::string& host,
                                      egress::HeaderList* headers) override {
    return b_->SubstituteHeaders(sandbox, host, headers);
  }
  std::vector<std::string> ResponseForms(const std::string& sandbox) override { return b_->ValueForms(sandbox); }

 private:
  std::shared_ptr<Broker> b_;
};

}  // namespace

std::shared_ptr<egress::RequestBroker> NewEgressBroker(std::shared_ptr<Broker> broker) {
  return std::make_shared<EgressBroker>(std::move(broker));
}

}  // namespace airlock::secrets
