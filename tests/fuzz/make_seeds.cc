// Writes the binary seed corpora of the protobuf harnesses from xdm-sim's own
// answers (8 PPU-810E and 2 A100 devices), plus hostile variants. Run once by
// hand when the proto changes; its output is committed under corpus/:
//   build-fuzz/tests/fuzz/make_seeds tests/fuzz/corpus
#include <fstream>
#include <iostream>
#include <limits>

#include "fleet.h"
#include "kubelet/podresources.pb.h"
#include "models.h"

namespace {

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string Split(const std::string& a, const std::string& b) {
  std::string out(2, '\0');
  out[0] = static_cast<char>(a.size() >> 8);
  out[1] = static_cast<char>(a.size() & 0xff);
  return out + a + b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_seeds CORPUS_DIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  int n = 0;
  for (const char* model : {"PPU-810E", "A100-SXM4-80GB"}) {
    const xdmsim::ModelSpec* spec = xdmsim::FindModel(model);
    xdmsim::Fleet fleet(*spec, model[0] == 'P' ? 8 : 2, 1, -1, /*frozen=*/true);
    fleet.Tick(1700000000000, 1000);
    xdm::api::ExporterDataResponse data = fleet.Data({});
    Write(dir + "/upstream_data/seed-" + std::to_string(n), data.SerializeAsString());
    fleet.SetGarbage(true);
    Write(dir + "/upstream_data/garbage-" + std::to_string(n), fleet.Data({}).SerializeAsString());
    // Garbage mode's 1 MiB model name, cut to keep seeds small and fast.
    xdm::api::ListAndWatchResponse law = fleet.Devices();
    for (auto& d : *law.mutable_devices())
      if (d.type().size() > 300) d.set_type(d.type().substr(0, 300));
    xdm::api::GpuInfoResponse info = fleet.GpuInfo({});
    for (auto& g : *info.mutable_gpuinfos())
      if (g.model().size() > 300) g.set_model(g.model().substr(0, 300));
    Write(dir + "/list_and_watch/garbage-" + std::to_string(n),
          Split(law.SerializeAsString(), info.SerializeAsString()));
    fleet.SetGarbage(false);
    Write(dir + "/list_and_watch/seed-" + std::to_string(n),
          Split(fleet.Devices().SerializeAsString(), fleet.GpuInfo({}).SerializeAsString()));
    Write(dir + "/topology/seed-" + std::to_string(n), xdmsim::TopologyJson(*spec, 0, 8));
    ++n;
  }
  v1::ListPodResourcesResponse pods;
  auto* pod = pods.add_pod_resources();
  pod->set_name("train-0");
  pod->set_namespace_("ml");
  auto* c = pod->add_containers();
  c->set_name("main");
  auto* d = c->add_devices();
  d->set_resource_name("lingjun.com/xpu");
  d->add_device_ids("GPU-0123");
  d->add_device_ids("GPU-0123::1");
  Write(dir + "/pod_resources/seed-0", pods.SerializeAsString());
  auto* dra = c->add_dynamic_resources();
  dra->set_claim_name("gpus");
  dra->set_claim_namespace("ml");
  auto* res = dra->add_claim_resources();
  res->set_driver_name("xpu.lingjun.com");
  res->set_pool_name("node-a");
  res->set_device_name("xpu-1");
  res->add_cdi_devices()->set_name("lingjun.com/xpu=xpu-1");
  Write(dir + "/pod_resources/seed-dra", pods.SerializeAsString());
  std::cout << "seeds written under " << dir << "\n";
  return 0;
}
