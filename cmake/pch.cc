// The donor of airlock's one precompiled header (CMakeLists.txt,
// airlock_precompile): compiling this file builds it; every other C++
// target reuses it.
