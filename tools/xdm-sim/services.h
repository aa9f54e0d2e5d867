#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/service_type.h>

#include <memory>

namespace xdmsim {

class Simulator;

// The two upstream services over the simulator's state. Both hold a pointer to
// `sim`, which must outlive them. Called on gRPC's server threads.
std::unique_ptr<grpc::Service> MakeXdmService(Simulator* sim);
std::unique_ptr<grpc::Service> MakeConfigService(Simulator* sim);
// A stand-in for the kubelet's PodResources API over the fleet's allocations.
std::unique_ptr<grpc::Service> MakeKubeletService(Simulator* sim);

}  // namespace xdmsim
