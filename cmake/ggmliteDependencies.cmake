# xxHash and cJSON, which ggmlite links (xxHash: the engine and io; cJSON:
# io), as the imported targets their own CMake packages name, xxHash::xxhash
# and cjson. Debian ships no CMake package for xxHash, so both are found by
# hand here; a target of that name that already exists is used as it is.
# Included by ggmlite's build and by the installed ggmliteConfig.cmake (a
# static ggmlite's link interface names these targets). Defines a target
# only when its header and library are found; the includer checks.
if(NOT TARGET xxHash::xxhash)
  find_path(XXHASH_INCLUDE_DIR xxhash.h)
  find_library(XXHASH_LIBRARY NAMES xxhash)
  if(XXHASH_INCLUDE_DIR AND XXHASH_LIBRARY)
    add_library(xxHash::xxhash UNKNOWN IMPORTED)
    set_target_properties(xxHash::xxhash PROPERTIES
      IMPORTED_LOCATION "${XXHASH_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${XXHASH_INCLUDE_DIR}")
  endif()
endif()
if(NOT TARGET cjson)
  find_path(CJSON_INCLUDE_DIR cjson/cJSON.h)
  find_library(CJSON_LIBRARY NAMES cjson)
  if(CJSON_INCLUDE_DIR AND CJSON_LIBRARY)
    add_library(cjson UNKNOWN IMPORTED)
    set_target_properties(cjson PROPERTIES
      IMPORTED_LOCATION "${CJSON_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${CJSON_INCLUDE_DIR}")
  endif()
endif()
