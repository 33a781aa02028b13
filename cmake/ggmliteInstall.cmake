# What `cmake --install` puts under the prefix (included when GGMLITE_INSTALL):
#   include/ggmlite/         ggmlite.h (including types.h, tensor.h, registry.h,
#                            compute.h), export.h, hashindex.h, ops.inc,
#                            attention.h, kv_cache.h, layers.h, io.h
#   include/ggmlite/mpi.h    with -DGGMLITE_MPI=ON
#   lib/                     libggmlite, libggmlite_models, libggmlite_io (.a, or
#                            .so with BUILD_SHARED_LIBS); libggmlite_mpi with
#                            -DGGMLITE_MPI=ON
#   lib/cmake/ggmlite/       the CMake package: find_package(ggmlite)
#   lib/pkgconfig/           ggmlite.pc, ggmlite-models.pc, ggmlite-io.pc
#                            (and ggmlite-mpi.pc)
#   bin/run-graph            when built (GGMLITE_TOOLS or GGMLITE_TESTS)
#   share/doc/ggmlite/       LICENSE
# lib is CMAKE_INSTALL_LIBDIR (GNUInstallDirs), as are the others.
include(CMakePackageConfigHelpers)

set(gml_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/ggmlite)
install(TARGETS ggmlite ggmlite_models ggmlite_io EXPORT ggmliteTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  FILE_SET HEADERS DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT ggmliteTargets NAMESPACE ggmlite:: DESTINATION ${gml_cmake_dir})
# ggmlite_mpi in an export set of its own: the package's config file loads it
# (and finds MPI) only where it was installed, so a prefix without it is
# still a whole package.
if(TARGET ggmlite_mpi)
  install(TARGETS ggmlite_mpi EXPORT ggmliteMpiTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
    FILE_SET HEADERS DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT ggmliteMpiTargets NAMESPACE ggmlite:: DESTINATION ${gml_cmake_dir})
endif()
if(TARGET run-graph)
  install(TARGETS run-graph RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR})

# The CMake package. The config file needs to know how the libraries were
# built: shared ones carry their dependencies themselves; static ones name
# xxHash::xxhash, cjson, Threads and OpenMP in their link interface, which the
# config file must then define.
if(BUILD_SHARED_LIBS)
  set(GGMLITE_CONFIG_SHARED ON)
else()
  set(GGMLITE_CONFIG_SHARED OFF)
endif()
if(GGMLITE_OPENMP)
  set(GGMLITE_CONFIG_OPENMP ON)
else()
  set(GGMLITE_CONFIG_OPENMP OFF)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/ggmliteConfig.cmake.in
  ${PROJECT_BINARY_DIR}/ggmliteConfig.cmake INSTALL_DESTINATION ${gml_cmake_dir})
# While the major version is 0, a minor version may break the API.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(gml_compatibility SameMinorVersion)
else()
  set(gml_compatibility SameMajorVersion)
endif()
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ggmliteConfigVersion.cmake
  COMPATIBILITY ${gml_compatibility})
install(FILES ${PROJECT_BINARY_DIR}/ggmliteConfig.cmake
  ${PROJECT_BINARY_DIR}/ggmliteConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/ggmliteDependencies.cmake
  DESTINATION ${gml_cmake_dir})

# pkg-config: one file per library. The prefix is found from the .pc file's
# own place (${pcfiledir}), so `cmake --install --prefix` anywhere works.
# Static libraries list their own dependencies as private (pkg-config
# --static); shared ones have them recorded in the .so.
set(gml_pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(IS_ABSOLUTE "${gml_pc_dir}")
  set(GGMLITE_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH gml_up /root/${gml_pc_dir} /root)
  string(REGEX REPLACE "/$" "" gml_up "${gml_up}")
  set(GGMLITE_PC_PREFIX "\${pcfiledir}/${gml_up}")
endif()
foreach(dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
    set(GGMLITE_PC_${dir} "${CMAKE_INSTALL_${dir}}")
  else()
    set(GGMLITE_PC_${dir} "\${prefix}/${CMAKE_INSTALL_${dir}}")
  endif()
endforeach()
set(GGMLITE_PC_LIBS_PRIVATE "-lm -pthread")
if(GGMLITE_OPENMP)
  string(APPEND GGMLITE_PC_LIBS_PRIVATE " ${OpenMP_C_FLAGS}")
endif()
set(gml_pcs ggmlite ggmlite-models ggmlite-io)
if(TARGET ggmlite_mpi)
  list(APPEND gml_pcs ggmlite-mpi)
endif()
foreach(pc ${gml_pcs})
  configure_file(${PROJECT_SOURCE_DIR}/cmake/${pc}.pc.in ${PROJECT_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${pc}.pc DESTINATION ${gml_pc_dir})
endforeach()
