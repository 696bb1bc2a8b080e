# Sourced on a lent GPU machine: unpacks .gpu_deps/debs (scripts/gpu/prepare_deps.sh) into a
# private prefix and points the compiler, CMake, pkg-config and the loader at it.
#   ZOFF_DEPS_PREFIX  where the packages are unpacked (default /tmp/zoff-deps)
ZOFF_DEPS_PREFIX="${ZOFF_DEPS_PREFIX:-/tmp/zoff-deps}"
if [[ ! -d "$ZOFF_DEPS_PREFIX/usr" ]]; then
  for deb in .gpu_deps/debs/*.deb; do dpkg-deb -x "$deb" "$ZOFF_DEPS_PREFIX"; done
fi
zoff_deps_lib="$ZOFF_DEPS_PREFIX/usr/lib/x86_64-linux-gnu"
export CPATH="$ZOFF_DEPS_PREFIX/usr/include${CPATH:+:$CPATH}"
export LIBRARY_PATH="$zoff_deps_lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$zoff_deps_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PKG_CONFIG_PATH="$zoff_deps_lib/pkgconfig:$ZOFF_DEPS_PREFIX/usr/share/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$ZOFF_DEPS_PREFIX"
export PATH="$ZOFF_DEPS_PREFIX/usr/bin:$PATH"
export CMAKE_PREFIX_PATH="$ZOFF_DEPS_PREFIX/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
