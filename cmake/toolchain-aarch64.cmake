# Cross build of the library for aarch64 Linux with Debian's gcc-aarch64-linux-gnu
# (`scripts/setup cross`). Only the portable kernels are built (the ISA table's x86 rows
# are left out, with their -m flags), and only the static library: the tests and the
# CLI need the target's cmocka and libcjson, which are not installed. Used as
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake \
#         -DTA_BUILD_TESTS=OFF -DTA_BUILD_CLI=OFF -DTA_WERROR=ON
#   cmake --build build-aarch64 --target tensorattn_static
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# No libcjson for arm64 here: the library compiles against the host's cJSON.h (the same
# header on every arch; CMakeLists.txt copies it alone into the build tree).
if(NOT TA_CJSON_HEADER AND EXISTS /usr/include/cjson/cJSON.h)
  set(TA_CJSON_HEADER /usr/include/cjson/cJSON.h CACHE FILEPATH "cJSON.h for the cross build")
endif()
