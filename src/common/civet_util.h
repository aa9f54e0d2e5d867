#pragma once

class CivetServer;

namespace xpu {

// Stops `server` promptly. civetweb's master thread polls its listening
// sockets with a 2 s timeout and notices mg_stop() only between polls, so a
// plain close() takes up to 2 s; connecting to each loopback listening port
// wakes it at once. Call from the thread that owns the server.
void CloseCivetServer(CivetServer& server);

}  // namespace xpu
