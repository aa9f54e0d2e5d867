#include "common/civet_util.h"

#include <CivetServer.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace xpu {
namespace {

void Poke(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Connected or refused, either way the master thread's poll() returned.
  // A deferred listener (TCP_DEFER_ACCEPT, civetweb patch 0004) hands the
  // connection over at the FIN that close() sends, as it would data: an
  // RST (SO_LINGER 0) would not wake it.
  (void)::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::close(fd);
}

}  // namespace

void CloseCivetServer(CivetServer& server) {
  const std::vector<int> ports = server.getListeningPorts();
  std::atomic<bool> done{false};
  std::thread closer([&] {
    server.close();
    done = true;
  });
  while (!done) {
    for (int p : ports) Poke(p);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  closer.join();
}

}  // namespace xpu
