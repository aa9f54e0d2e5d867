// The main() of every gtest binary: gtest's own, preceded by one step.
//
// spdlog's registry is a function-local static made by whichever thread logs
// first. libspdlog is not built with TSan, so TSan cannot see the guard that
// makes that construction safe and reports the registry's first use on one
// thread against its construction on another (CI saw it: XdmClient's stream
// and info threads both logging first in upstream_timing_test). The exporter's
// main() makes the registry before it starts a thread (app/logging.cc); every
// test binary does the same here, so no test has to remember it.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

int main(int argc, char** argv) {
  spdlog::default_logger();
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
