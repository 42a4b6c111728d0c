# Install rules and the .deb (CPack), included at the end of the root CMakeLists.txt (in its scope:
# paths below are relative to the repository root).
#
# Packaging (make package): a .deb with the binary, the library and its headers, the settings and
# rules under /etc/sluice (conffiles), and a hardened systemd unit. The packaged rules are the
# embedded default's (src/cli/default_config.h), extracted here so that there is one copy.
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             ${CMAKE_SOURCE_DIR}/src/cli/default_config.h)
file(READ ${CMAKE_SOURCE_DIR}/src/cli/default_config.h SLUICE_DEFAULT_CONFIG_H)
string(FIND "${SLUICE_DEFAULT_CONFIG_H}" "R\"yaml(" SLUICE_DEFAULT_BEGIN)
string(FIND "${SLUICE_DEFAULT_CONFIG_H}" ")yaml\"" SLUICE_DEFAULT_END)
math(EXPR SLUICE_DEFAULT_BEGIN "${SLUICE_DEFAULT_BEGIN} + 7")
math(EXPR SLUICE_DEFAULT_LENGTH "${SLUICE_DEFAULT_END} - ${SLUICE_DEFAULT_BEGIN}")
string(SUBSTRING "${SLUICE_DEFAULT_CONFIG_H}" ${SLUICE_DEFAULT_BEGIN} ${SLUICE_DEFAULT_LENGTH}
       SLUICE_DEFAULT_RULES)
file(WRITE ${CMAKE_BINARY_DIR}/package/rules/default.yaml "${SLUICE_DEFAULT_RULES}")

# sluice(1), written from the binary's own --help.
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/package/sluice.1.gz
  COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/manpage.sh $<TARGET_FILE:sluice> ${PROJECT_VERSION}
          ${CMAKE_BINARY_DIR}/package/sluice.1.gz
  DEPENDS sluice ${CMAKE_SOURCE_DIR}/scripts/manpage.sh VERBATIM)
add_custom_target(manpage ALL DEPENDS ${CMAKE_BINARY_DIR}/package/sluice.1.gz)
install(FILES ${CMAKE_BINARY_DIR}/package/sluice.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(TARGETS sluice RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The library, in the `library` component of its own (cmake --install --component library
# installs it alone; the rules below write to /etc): libsluice.so, its headers and the CMake
# package (find_package(sluice) + target_link_libraries(app sluice::sluice)).
install(TARGETS sluice_shared EXPORT sluiceTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT library NAMELINK_COMPONENT library)
install(DIRECTORY include/sluice DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT library)
include(CMakePackageConfigHelpers)
set(SLUICE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)
install(EXPORT sluiceTargets NAMESPACE sluice:: DESTINATION ${SLUICE_CMAKE_DIR}
  COMPONENT library)
configure_package_config_file(cmake/sluiceConfig.cmake.in
  ${CMAKE_BINARY_DIR}/cmake/sluiceConfig.cmake INSTALL_DESTINATION ${SLUICE_CMAKE_DIR})
# 0.x: a new minor version may change the API.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/sluiceConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/cmake/sluiceConfig.cmake
  ${CMAKE_BINARY_DIR}/cmake/sluiceConfigVersion.cmake
  DESTINATION ${SLUICE_CMAKE_DIR} COMPONENT library)
install(FILES deploy/etc/sluice.yaml DESTINATION /etc/sluice)
install(FILES ${CMAKE_BINARY_DIR}/package/rules/default.yaml DESTINATION /etc/sluice/rules)
install(FILES deploy/systemd/sluice.service DESTINATION lib/systemd/system)
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR} FILES_MATCHING PATTERN "*.md")
install(FILES deploy/prometheus/sluice.rules.yml DESTINATION ${CMAKE_INSTALL_DOCDIR}/prometheus)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME sluice)
set(CPACK_PACKAGE_CONTACT "sluice maintainers <maintainers@sluice.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "HTTP API rate limiter: library, forward-auth, reverse proxy, Envoy RLS")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # Depends from the binary's libraries (dpkg-shlibdeps)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)  # libsluice.so.0: a shlibs file, ldconfig triggers
configure_file(deploy/debian/conffiles ${CMAKE_BINARY_DIR}/package/debian/conffiles COPYONLY)
configure_file(deploy/debian/postinst ${CMAKE_BINARY_DIR}/package/debian/postinst COPYONLY)
configure_file(deploy/debian/prerm ${CMAKE_BINARY_DIR}/package/debian/prerm COPYONLY)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${CMAKE_BINARY_DIR}/package/debian/conffiles
    ${CMAKE_BINARY_DIR}/package/debian/postinst
    ${CMAKE_BINARY_DIR}/package/debian/prerm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
