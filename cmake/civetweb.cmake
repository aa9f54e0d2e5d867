# civetweb 1.15 built from Debian's own source package (the version bookworm
# ships as libcivetweb-dev), with what Debian's binary lacks: IPv6, and
# OpenSSL 3 linked directly through its 3.0 API instead of dlopen("libssl.so")
# and OpenSSL 1.1 names (why a libssl shim was once needed). See
# docs/http-api.md, "IPv6 and TLS".
#
# The source package's two files are fetched once from the Debian archive
# into .deps/ (shared by every build tree, copied into the container build),
# checked against the SHA-256 sums of its .dsc, and Debian's patches applied.
# Defines the target xpu::civetweb (the C API and CivetServer). Not
# civetweb::civetweb-cpp: prometheus-cpp's package config imports Debian's under
# that name (for its pull library, which we do not use).

set(XPU_CIVETWEB_VERSION "1.15+dfsg-4")
set(XPU_DEBIAN_MIRROR "http://deb.debian.org/debian" CACHE STRING
    "Debian archive to fetch civetweb's source package from")
# Our own patches (cmake/civetweb/*.patch, each with its reason in its head,
# written to be sent upstream) go on after Debian's; the tree's name carries
# their digest, so a changed patch unpacks a fresh tree.
file(GLOB _cw_ours CONFIGURE_DEPENDS "${CMAKE_CURRENT_LIST_DIR}/civetweb/*.patch")
list(SORT _cw_ours)
set(_cw_digest "")
foreach(p ${_cw_ours})
  file(SHA256 "${p}" h)
  string(APPEND _cw_digest "${h}")
endforeach()
string(SHA256 _cw_digest "${_cw_digest}")
string(SUBSTRING "${_cw_digest}" 0 12 _cw_digest)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_cw_ours})
set(_cw_dir "${PROJECT_SOURCE_DIR}/.deps/civetweb-${XPU_CIVETWEB_VERSION}-${_cw_digest}")
# name|sha256 (from civetweb_1.15+dfsg-4.dsc, Checksums-Sha256)
set(_cw_files
    "civetweb_1.15+dfsg.orig.tar.xz|ec372e9737bc820118bbb735f46a07d41f795814ca0f38bc6e67048e7a460f33"
    "civetweb_1.15+dfsg-4.debian.tar.xz|2fe67d05a15be93764398275372f41f6228b17497b23d04f149482ffde7b3fb8")

if(NOT EXISTS "${_cw_dir}/src/civetweb.c")
  set(_cw_dl "${PROJECT_SOURCE_DIR}/.deps/download")
  set(_cw_tmp "${_cw_dir}.tmp")
  file(REMOVE_RECURSE "${_cw_tmp}")
  file(MAKE_DIRECTORY "${_cw_dl}" "${_cw_tmp}")
  foreach(entry ${_cw_files})
    string(REPLACE "|" ";" entry "${entry}")
    list(GET entry 0 name)
    list(GET entry 1 sha)
    set(file "${_cw_dl}/${name}")
    string(REPLACE "+" "%2B" url_name "${name}")
    set(url "${XPU_DEBIAN_MIRROR}/pool/main/c/civetweb/${url_name}")
    if(NOT EXISTS "${file}")
      message(STATUS "civetweb: fetching ${url}")
      file(DOWNLOAD "${url}" "${file}.part" STATUS status EXPECTED_HASH SHA256=${sha})
      list(GET status 0 code)
      if(NOT code EQUAL 0)
        file(REMOVE "${file}.part")
        list(GET status 1 why)
        message(FATAL_ERROR "civetweb: cannot fetch ${url}: ${why}. Set XPU_DEBIAN_MIRROR, "
                            "or put ${name} into ${_cw_dl}.")
      endif()
      file(RENAME "${file}.part" "${file}")
    else()
      file(SHA256 "${file}" have)
      if(NOT have STREQUAL sha)
        message(FATAL_ERROR "civetweb: ${file} has SHA-256 ${have}, not ${sha}; delete it")
      endif()
    endif()
    file(ARCHIVE_EXTRACT INPUT "${file}" DESTINATION "${_cw_tmp}")
  endforeach()
  # The orig tarball unpacks into civetweb-1.15/, the Debian one into debian/.
  file(RENAME "${_cw_tmp}/debian" "${_cw_tmp}/civetweb-1.15/debian")
  # Debian's patches in their series order, then ours.
  file(STRINGS "${_cw_tmp}/civetweb-1.15/debian/patches/series" _cw_patches REGEX "^[^#]")
  list(TRANSFORM _cw_patches PREPEND "${_cw_tmp}/civetweb-1.15/debian/patches/")
  foreach(p ${_cw_patches} ${_cw_ours})
    execute_process(COMMAND patch -p1 -s -i "${p}"
                    WORKING_DIRECTORY "${_cw_tmp}/civetweb-1.15" RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "civetweb: patch ${p} does not apply")
    endif()
  endforeach()
  file(RENAME "${_cw_tmp}/civetweb-1.15" "${_cw_dir}")
  file(REMOVE_RECURSE "${_cw_tmp}")
endif()

enable_language(C)
add_library(xpu_civetweb STATIC "${_cw_dir}/src/civetweb.c" "${_cw_dir}/src/CivetServer.cpp")
target_include_directories(xpu_civetweb SYSTEM PUBLIC "${_cw_dir}/include")
# USE_IPV6: "[::]:9445" and dual-stack "+9445". NO_SSL_DL + OPENSSL_API_3_0:
# link libssl.so.3 and call its 3.0 API. NO_CGI: nothing is served from disk.
target_compile_definitions(xpu_civetweb PRIVATE USE_IPV6 NO_SSL_DL OPENSSL_API_3_0 NO_CGI)
# Third-party code: not our warnings; and left uninstrumented by the
# sanitizer builds, as Debian's library was (its races are not ours to judge).
target_compile_options(xpu_civetweb PRIVATE -w -fno-sanitize=all)
# The serving path is -O2 in every build (src/http/CMakeLists.txt says why).
if(NOT XPU_SANITIZE STREQUAL "")
  target_compile_options(xpu_civetweb PRIVATE -O2)
endif()
target_link_libraries(xpu_civetweb PUBLIC OpenSSL::SSL OpenSSL::Crypto Threads::Threads
                                          ${CMAKE_DL_LIBS})
set_target_properties(xpu_civetweb PROPERTIES POSITION_INDEPENDENT_CODE ON)
add_library(xpu::civetweb ALIAS xpu_civetweb)
