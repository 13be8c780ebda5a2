# Turns a text file into a C++ source defining `const char NAME[]` (in
# airlock::image) holding it: the initramfs's /init and the desktop
# template's guest scripts, carried inside the binaries that install them.
# Usage: cmake -DIN=... -DOUT=... -DNAME=... -P embed_text.cmake
file(READ "${IN}" text)
get_filename_component(source "${IN}" NAME)
file(WRITE "${OUT}.tmp"
  "// Generated from ${source} by embed_text.cmake. Do not edit.\n"
  "namespace airlock::image {\n"
  "extern const char ${NAME}[];\n"
  "const char ${NAME}[] = R\"airlock_text(${text})airlock_text\";\n"
  "}  // namespace airlock::image\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
