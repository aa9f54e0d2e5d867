# One precompiled header for the clang builds (ASan, TSan, the fuzzers),
# shared by our libraries and programs (xpu_add_library, xpu_add_executable)
# compiled at -O0: the standard library, grpc++, protobuf,
# prometheus-cpp, spdlog, nlohmann, yaml-cpp, CLI11 and gtest are parsed once
# per build instead of once per batch. In the -O0 TSan build parsing is most
# of a batch's time (a batch of src/app: 9.4 s of 13.3 s), and these headers
# are most of what is parsed. README ("Run every test") has what it saves.
#
# The plain build (gcc) does not use it: gcc's precompiled header of the same
# list is 220 MB and saved a tenth of a batch.
#
# In the sanitizer builds it is made at -O0, and only the targets at -O0
# read it (xpu_optimize: clang refuses a header made at another -O, naming
# the option); in a plain clang build every target reads it. Macros a
# target defines beside (GTEST_HAS_PTHREAD, a test's paths) do not matter.
#
# ccache caches what reads it when told that the header's own macros and
# time stamp are not inputs (sloppiness, where CMakeLists.txt sets the
# launcher; -fno-pch-timestamp keeps the stamp out of the file).
if(XPU_PCH AND CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  # Every target compiles with -pthread, as most already do (clang wants
  # the header's -pthread on the reader too; it only defines _REENTRANT).
  add_compile_options(-pthread)
  add_library(xpu_pch OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch.cc)
  # gtest and gmock only where tests or harnesses are built (a build
  # without them need not have them installed).
  set(test_headers)
  if(XPU_BUILD_TESTS OR XPU_FUZZ)
    find_package(GTest CONFIG REQUIRED)
    target_link_libraries(xpu_pch PRIVATE GTest::gtest GTest::gmock)
    set(test_headers <gtest/gtest.h> <gmock/gmock.h>)
  endif()
  target_link_libraries(xpu_pch PRIVATE gRPC::grpc++ protobuf::libprotobuf prometheus-cpp::core
                        spdlog::spdlog nlohmann_json::nlohmann_json yaml-cpp CLI11::CLI11
                        Threads::Threads)
  target_compile_options(xpu_pch PRIVATE ${XPU_WARNINGS} -Xclang -fno-pch-timestamp)
  if(NOT XPU_SANITIZE STREQUAL "" AND NOT XPU_SANITIZE_OPT STREQUAL "-O0")
    target_compile_options(xpu_pch PRIVATE -O0)
  endif()
  target_precompile_headers(xpu_pch PRIVATE
    <algorithm> <atomic> <chrono> <cstdint> <cstring> <deque> <filesystem> <functional> <map>
    <memory> <mutex> <optional> <regex> <set> <string> <string_view> <thread> <unordered_map>
    <vector>
    <grpcpp/grpcpp.h> <google/protobuf/message.h> <prometheus/registry.h>
    <prometheus/counter.h> <prometheus/gauge.h> <prometheus/histogram.h> <spdlog/spdlog.h>
    <nlohmann/json.hpp> <yaml-cpp/yaml.h> <CLI/CLI.hpp> ${test_headers})
endif()

function(xpu_shared_pch target)
  if(TARGET xpu_pch)
    target_precompile_headers(${target} REUSE_FROM xpu_pch)
  endif()
endfunction()
