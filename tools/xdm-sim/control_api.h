#pragma once

#include <CivetServer.h>

namespace xdmsim {

class Simulator;

// The loopback HTTP control API (docs/simulator.md): faults, health, stream
// breaks, pause/resume and the device count. Called on civetweb's worker
// threads; `sim` must outlive it.
class ControlHandler : public CivetHandler {
 public:
  explicit ControlHandler(Simulator* sim) : sim_(sim) {}
  bool handleGet(CivetServer* server, struct mg_connection* conn) override;
  bool handlePost(CivetServer* server, struct mg_connection* conn) override;
  bool handleDelete(CivetServer* server, struct mg_connection* conn) override;

 private:
  Simulator* sim_;
};

}  // namespace xdmsim
