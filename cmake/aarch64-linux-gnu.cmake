# Cross build for AArch64 Linux with Debian's cross compiler, its tests run
# under qemu-user (tools/quickstart.sh test does both):
#   apt-get install gcc-aarch64-linux-gnu qemu-user
#   dpkg --add-architecture arm64 && apt-get update
#   apt-get install libxxhash-dev:arm64 libcjson-dev:arm64
#   cmake -S . -B build-arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
#   cmake --build build-arm64 && ctest --test-dir build-arm64
# The arm64 libraries (and the libc they pull in) are Debian's multiarch
# packages, in /usr/lib/aarch64-linux-gnu, where the cross compiler and
# CMake look (CMAKE_LIBRARY_ARCHITECTURE), and where the arm64 dynamic
# loader (/lib/ld-linux-aarch64.so.1) finds them when qemu-aarch64 runs a
# program. CTest runs every test program through qemu-aarch64
# (CMAKE_CROSSCOMPILING_EMULATOR); tests/CMakeLists.txt hands the shell
# tests wrappers that do the same.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
