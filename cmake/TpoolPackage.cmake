# Install layout, the CMake package config and the Debian package (issue 9).
#
# Included last by the root CMakeLists.txt, so every target is defined by now;
# each one that a partial build may lack (the daemon, the client, the plugins)
# is installed only if it exists.
#
# Two install components:
#   devel    the pool library and headers and the CMake package config:
#            find_package(tpool) gives tpool::pool and tpool::plugin_sdk.
#            Needs nothing but the pool. (The SDK header, tpool/plugin.h, is
#            component sdk, installed by plugins/include.)
#   runtime  bin/tpoold, bin/tpoolctl, lib/tpool/plugins/*.so, the sample
#            config, the systemd unit and the docs.
#
#   <prefix>/bin/tpoold, <prefix>/bin/tpoolctl
#   <prefix>/lib/tpool/plugins/*.so           (TPOOL_INSTALL_PLUGINDIR)
#   <prefix>/include/tpool/{pool.h,pool/*.h,common/*.h,plugin.h}
#   <prefix>/<libdir>/libtpool_{pool,common}.a, <prefix>/<libdir>/cmake/tpool/
#   <prefix>/etc/tpoold/tpoold.toml           (/etc/tpoold when prefix is /usr)
#   <prefix>/lib/systemd/system/tpoold.service
#   <prefix>/share/doc/tpoold/                (docs, Prometheus and Grafana files)
include(CMakePackageConfigHelpers)

set(TPOOL_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/tpool")
# Not CMAKE_INSTALL_LIBDIR: the plugin directory is one documented path
# (/usr/lib/tpool/plugins in the .deb and the container), not a multiarch one.
set(TPOOL_INSTALL_PLUGINDIR "lib/tpool/plugins")
set(TPOOL_INSTALL_UNITDIR "lib/systemd/system")
set(TPOOL_INSTALL_DOCDIR "${CMAKE_INSTALL_DATAROOTDIR}/doc/tpoold")

# ---- devel: library, headers, package config ---------------------------------
# tpool_pool links tpool::warnings privately; a static library's private
# links are part of its export (as $<LINK_ONLY:...>), so the interface target
# must be in the export set too. It carries only compile options, which
# LINK_ONLY does not pass on, so consumers are not affected.
set_target_properties(tpool_warnings PROPERTIES EXPORT_NAME warnings)
install(TARGETS tpool_pool tpool_common tpool_warnings EXPORT tpoolTargets
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT devel
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT devel
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT devel)
foreach(_inc pool common)
  install(DIRECTORY "${PROJECT_SOURCE_DIR}/daemon/${_inc}/include/tpool"
    DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}" COMPONENT devel
    FILES_MATCHING PATTERN "*.h")
endforeach()

# The plugin SDK header itself is installed (component sdk) by
# plugins/include/CMakeLists.txt; the target goes into the export here.
if(TARGET tpool_plugin_sdk)
  set_target_properties(tpool_plugin_sdk PROPERTIES EXPORT_NAME plugin_sdk)
  install(TARGETS tpool_plugin_sdk EXPORT tpoolTargets COMPONENT devel)
endif()

install(EXPORT tpoolTargets NAMESPACE tpool:: FILE tpoolTargets.cmake
  DESTINATION "${TPOOL_INSTALL_CMAKEDIR}" COMPONENT devel)
configure_package_config_file("${CMAKE_CURRENT_LIST_DIR}/tpoolConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/tpoolConfig.cmake"
  INSTALL_DESTINATION "${TPOOL_INSTALL_CMAKEDIR}"
  PATH_VARS TPOOL_INSTALL_PLUGINDIR CMAKE_INSTALL_INCLUDEDIR)
# 0.x: a minor version may change the ABI, so only the same minor matches.
write_basic_package_version_file("${PROJECT_BINARY_DIR}/tpoolConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}" COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/tpoolConfig.cmake"
              "${PROJECT_BINARY_DIR}/tpoolConfigVersion.cmake"
  DESTINATION "${TPOOL_INSTALL_CMAKEDIR}" COMPONENT devel)

# ---- runtime: binaries, plugins, config, unit, docs ---------------------------
foreach(exe tpoold tpoolctl tpool-runner)
  if(TARGET ${exe})
    install(TARGETS ${exe} RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT runtime)
  endif()
endforeach()

# Every shared or module library defined under plugins/examples is a plugin.
function(tpool_collect_plugins dir out)
  set(found)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(type STREQUAL "MODULE_LIBRARY" OR type STREQUAL "SHARED_LIBRARY")
      list(APPEND found ${t})
    endif()
  endforeach()
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    tpool_collect_plugins("${sub}" sub_found)
    list(APPEND found ${sub_found})
  endforeach()
  set(${out} ${found} PARENT_SCOPE)
endfunction()
set(TPOOL_PLUGIN_TARGETS)
if(EXISTS "${PROJECT_SOURCE_DIR}/plugins/examples/CMakeLists.txt")
  tpool_collect_plugins("${PROJECT_SOURCE_DIR}/plugins/examples" TPOOL_PLUGIN_TARGETS)
endif()
foreach(p IN LISTS TPOOL_PLUGIN_TARGETS)
  install(TARGETS ${p}
    LIBRARY DESTINATION "${TPOOL_INSTALL_PLUGINDIR}" COMPONENT runtime
    RUNTIME DESTINATION "${TPOOL_INSTALL_PLUGINDIR}" COMPONENT runtime)
endforeach()
# /metrics over TLS: tpoold loads these from <bindir>/../lib/tpool/civetweb
# (daemon/metrics/civetweb_openssl/libssl_shim.c).
if(TARGET tpool_civetweb_libssl AND TARGET tpoold)
  install(TARGETS tpool_civetweb_libssl tpool_civetweb_libcrypto
    LIBRARY DESTINATION "lib/tpool/civetweb" COMPONENT runtime)
endif()

# The sample config and the unit name absolute paths (/usr/bin/tpoold,
# /etc/tpoold, /usr/lib/tpool/plugins): the .deb layout. Installed under
# another prefix they are rewritten to it at install time, and the config goes
# to <prefix>/etc/tpoold, except for prefix /usr, where it goes to /etc/tpoold
# (the GNUInstallDirs rule for SYSCONFDIR).
set(TPOOL_SAMPLE_CONFIG "${PROJECT_SOURCE_DIR}/deploy/tpoold.toml")
set(TPOOL_UNIT_FILE "${PROJECT_SOURCE_DIR}/deploy/systemd/tpoold.service")
install(CODE "
  set(_prefix \"\${CMAKE_INSTALL_PREFIX}\")
  if(_prefix STREQUAL \"/usr\")
    set(_etc \"/etc\")
  else()
    set(_etc \"\${_prefix}/etc\")
  endif()
  function(tpool_install_rewritten src dest_dir)
    file(READ \"\${src}\" text)
    string(REPLACE \"/usr/lib/tpool/plugins\" \"\${_prefix}/${TPOOL_INSTALL_PLUGINDIR}\" text \"\${text}\")
    string(REPLACE \"/usr/share/doc/tpoold\" \"\${_prefix}/${TPOOL_INSTALL_DOCDIR}\" text \"\${text}\")
    string(REPLACE \"/usr/bin/\" \"\${_prefix}/${CMAKE_INSTALL_BINDIR}/\" text \"\${text}\")
    string(REPLACE \"/etc/tpoold\" \"\${_etc}/tpoold\" text \"\${text}\")
    get_filename_component(name \"\${src}\" NAME)
    set(staged \"${PROJECT_BINARY_DIR}/tpool-install-staged/\${name}\")
    file(WRITE \"\${staged}\" \"\${text}\")
    file(INSTALL DESTINATION \"\${dest_dir}\" TYPE FILE
         PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ FILES \"\${staged}\")
  endfunction()
  tpool_install_rewritten(\"${TPOOL_SAMPLE_CONFIG}\" \"\${_etc}/tpoold\")
  # The operator's own plugins (plugins.dirs in the sample config).
  file(MAKE_DIRECTORY \"\$ENV{DESTDIR}\${_etc}/tpoold/plugins.d\")
  tpool_install_rewritten(\"${TPOOL_UNIT_FILE}\" \"\${_prefix}/${TPOOL_INSTALL_UNITDIR}\")
" COMPONENT runtime)

file(GLOB tpool_docs "${PROJECT_SOURCE_DIR}/docs/*.md")
install(FILES "${PROJECT_SOURCE_DIR}/README.md" ${tpool_docs}
  DESTINATION "${TPOOL_INSTALL_DOCDIR}" COMPONENT runtime)
install(DIRECTORY "${PROJECT_SOURCE_DIR}/deploy/prometheus" "${PROJECT_SOURCE_DIR}/deploy/grafana"
  DESTINATION "${TPOOL_INSTALL_DOCDIR}/examples" COMPONENT runtime
  PATTERN "tests" EXCLUDE)

# ---- Debian package (`make package` -> tpoold_<version>_amd64.deb) -------------
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "tpoold")
set(CPACK_PACKAGE_VENDOR "tpoold")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_CONTACT "tpoold maintainers <tpoold@example.invalid>")
# Install with DESTDIR and CMAKE_INSTALL_PREFIX=/usr (whatever the build tree
# was configured with), so the install code above sees the real prefix and
# puts the config in /etc.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX "/usr")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_NAME "tpoold")
set(CPACK_DEBIAN_FILE_NAME "DEB-DEFAULT")
set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE "amd64")
set(CPACK_DEBIAN_PACKAGE_SECTION "net")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "${PROJECT_HOMEPAGE_URL}")
string(CONCAT CPACK_DEBIAN_PACKAGE_DESCRIPTION
  "tpoold runs jobs submitted over gRPC on a work-stealing thread pool.\n"
  "Job handlers are shared-object plugins loaded through a versioned C ABI;\n"
  "the pool's health is exported to Prometheus. Includes the tpoolctl client,\n"
  "the example plugins, a hardened systemd unit and the plugin SDK.")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# adduser for the system user in postinst; the library dependencies come from
# dpkg-shlibdeps.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    "${PROJECT_SOURCE_DIR}/deploy/debian/conffiles"
    "${PROJECT_SOURCE_DIR}/deploy/debian/postinst"
    "${PROJECT_SOURCE_DIR}/deploy/debian/prerm"
    "${PROJECT_SOURCE_DIR}/deploy/debian/postrm")
include(CPack)
