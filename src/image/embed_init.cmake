# Turns initramfs_init.sh into a C++ source defining kInitramfsInitText.
# Usage: cmake -DIN=... -DOUT=... -P embed_init.cmake
file(READ "${IN}" text)
file(WRITE "${OUT}.tmp"
  "// Generated from src/image/initramfs_init.sh by embed_init.cmake. Do not edit.\n"
  "namespace airlock::image {\n"
  "extern const char kInitramfsInitText[];\n"
  "const char kInitramfsInitText[] = R\"airlock_init(${text})airlock_init\";\n"
  "}  // namespace airlock::image\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
