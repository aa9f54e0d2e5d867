# The Debian package (./x package): CPack's DEB generator over the plain
# build's install, component by component: `exporter` is the binary alone
# (what the container image installs), `deb` what only the package carries:
# the systemd unit, /etc/default/xpu-exporter (a conffile), the man page
# made from --help, the copyright and changelog. Depends: from
# dpkg-shlibdeps, Debian's shared libraries at the versions this build used.
# The maintainer scripts (deploy/debian) reload systemd; the unit is not
# enabled until its flags are set (deploy/README.md).
set(XPU_DEB_DIR ${PROJECT_SOURCE_DIR}/deploy/debian)
set(XPU_DEB_GEN ${PROJECT_BINARY_DIR}/deb)

install(FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/xpu-exporter.service
        DESTINATION /lib/systemd/system PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
        COMPONENT deb)
install(FILES ${XPU_DEB_DIR}/xpu-exporter.default DESTINATION /etc/default RENAME xpu-exporter
        PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ COMPONENT deb)
install(FILES ${XPU_DEB_DIR}/copyright DESTINATION share/doc/xpu-exporter
        PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ COMPONENT deb)

# The man page from --help (help2man, where installed: ./x package installs
# it) and the changelog, compressed as Debian's policy wants (-9n: no name or
# time in the header, so the package is the same from the same build).
find_program(XPU_HELP2MAN help2man)
find_program(XPU_GZIP gzip REQUIRED)
add_custom_command(OUTPUT ${XPU_DEB_GEN}/changelog.gz
  COMMAND ${CMAKE_COMMAND} -E make_directory ${XPU_DEB_GEN}
  COMMAND ${CMAKE_COMMAND} -E copy ${XPU_DEB_DIR}/changelog ${XPU_DEB_GEN}/changelog
  COMMAND ${XPU_GZIP} -9nf ${XPU_DEB_GEN}/changelog
  DEPENDS ${XPU_DEB_DIR}/changelog VERBATIM)
set(xpu_deb_docs ${XPU_DEB_GEN}/changelog.gz)
if(XPU_HELP2MAN)
  # help2man dates the page: the date of the changelog's latest entry, so the
  # page is the same from the same source whenever it is built
  # (SOURCE_DATE_EPOCH, reproducible-builds.org).
  file(STRINGS ${XPU_DEB_DIR}/changelog xpu_deb_trailer REGEX "^ -- .*>  " LIMIT_COUNT 1)
  string(REGEX REPLACE "^.*>  " "" xpu_deb_date "${xpu_deb_trailer}")
  execute_process(COMMAND date -d "${xpu_deb_date}" +%s OUTPUT_VARIABLE xpu_deb_epoch
                  OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE xpu_deb_date_rc)
  if(NOT xpu_deb_date_rc EQUAL 0 OR xpu_deb_epoch STREQUAL "")
    message(FATAL_ERROR "deploy/debian/changelog: no date in its latest entry's trailer")
  endif()
  add_custom_command(OUTPUT ${XPU_DEB_GEN}/xpu-exporter.1.gz
    COMMAND ${CMAKE_COMMAND} -E make_directory ${XPU_DEB_GEN}
    COMMAND ${CMAKE_COMMAND} -E env SOURCE_DATE_EPOCH=${xpu_deb_epoch} ${XPU_HELP2MAN} --no-info --section 1 --source "xpu-exporter"
            --name "Prometheus exporter for AI accelerators (Lingjun Runtime Kit)"
            --output ${XPU_DEB_GEN}/xpu-exporter.1 $<TARGET_FILE:xpu-exporter>
    COMMAND ${XPU_GZIP} -9nf ${XPU_DEB_GEN}/xpu-exporter.1
    DEPENDS xpu-exporter ${XPU_DEB_DIR}/changelog VERBATIM)
  list(APPEND xpu_deb_docs ${XPU_DEB_GEN}/xpu-exporter.1.gz)
  install(FILES ${XPU_DEB_GEN}/xpu-exporter.1.gz DESTINATION share/man/man1
          PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ COMPONENT deb OPTIONAL)
endif()
add_custom_target(xpu_deb_docs ALL DEPENDS ${xpu_deb_docs})
install(FILES ${XPU_DEB_GEN}/changelog.gz DESTINATION share/doc/xpu-exporter
        PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ COMPONENT deb)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME xpu-exporter)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/package)
set(CPACK_COMPONENTS_ALL exporter deb)
set(CPACK_PACKAGE_CONTACT "xpu-exporter maintainers <maintainers@users.noreply.a-seed-1058f06d.example>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Prometheus exporter for AI accelerators (Lingjun Runtime Kit)")
# The synopsis is the summary above; this is the long description.
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "xpu-exporter streams device metrics from the Lingjun Runtime Kit's XDM
daemon, samples the hardware directly for health and fault codes (sysfs,
the kernel's PCI files and log, NVIDIA's NVML where installed) and serves
them on /metrics for Prometheus, with /status, /config and health probes.
This package runs it under systemd, without Kubernetes.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE https://github.com/xpu-exporter/xpu-exporter)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${XPU_DEB_DIR}/conffiles ${XPU_DEB_DIR}/postinst ${XPU_DEB_DIR}/prerm ${XPU_DEB_DIR}/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
