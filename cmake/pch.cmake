# One precompiled header for the clang builds (ASan, TSan, the fuzzers),
# shared by every library and program of ours (xpu_add_library,
# xpu_add_executable): the standard library, grpc++, protobuf,
# prometheus-cpp, spdlog, nlohmann, yaml-cpp, CLI11 and gtest are parsed once
# per build instead of once per batch. In the -O0 TSan build parsing is most
# of a batch's time (a batch of src/app: 9.4 s of 13.3 s), and these headers
# are most of what is parsed. README ("Run every test") has what it saves.
#
# The plain build (gcc) does not use it: gcc's precompiled header of the same
# list is 220 MB and saved a tenth of a batch.
#
# A target that compiles with other options than the build's (a different
# -O, another sanitizer) cannot read it (clang refuses it, naming the
# option): xpu_add_library(... NO_SHARED_PCH). Macros a target defines
# beside (GTEST_HAS_PTHREAD, a test's paths) do not matter to clang.
#
# ccache caches what reads it when told that the header's own macros and
# time stamp are not inputs (sloppiness, below; -fno-pch-timestamp keeps the
# stamp out of the file).
option(XPU_PCH "One precompiled header for the clang builds" ON)
if(XPU_PCH AND CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  # Every target compiles with -pthread, as most already do (clang wants
  # the header's -pthread on the reader too; it only defines _REENTRANT).
  add_compile_options(-pthread)
  add_library(xpu_pch OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch.cc)
  find_package(GTest CONFIG REQUIRED)
  target_link_libraries(xpu_pch PRIVATE gRPC::grpc++ protobuf::libprotobuf prometheus-cpp::core
                        spdlog::spdlog nlohmann_json::nlohmann_json yaml-cpp CLI11::CLI11 GTest::gtest
                        GTest::gmock Threads::Threads)
  target_compile_options(xpu_pch PRIVATE ${XPU_WARNINGS} -Xclang -fno-pch-timestamp)
  target_precompile_headers(xpu_pch PRIVATE
    <algorithm> <atomic> <chrono> <cstdint> <cstring> <deque> <filesystem> <functional> <map>
    <memory> <mutex> <optional> <regex> <set> <string> <string_view> <thread> <unordered_map>
    <vector>
    <grpcpp/grpcpp.h> <google/protobuf/message.h> <prometheus/registry.h>
    <prometheus/counter.h> <prometheus/gauge.h> <prometheus/histogram.h> <spdlog/spdlog.h>
    <nlohmann/json.hpp> <yaml-cpp/yaml.h> <CLI/CLI.hpp> <gtest/gtest.h> <gmock/gmock.h>)
  if(CCACHE_PROGRAM)
    set(CMAKE_CXX_COMPILER_LAUNCHER env
        CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime ${CCACHE_PROGRAM})
  endif()
endif()

function(xpu_shared_pch target)
  if(TARGET xpu_pch)
    target_precompile_headers(${target} REUSE_FROM xpu_pch)
  endif()
endfunction()
