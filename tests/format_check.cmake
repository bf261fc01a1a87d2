# Fails when a C++ file under src/, tests/ or bench/ is not formatted as
# .clang-format says (Google style, 100 columns). The layout depends on the
# formatter's version: this is the one Debian 12 ships (clang-format 14).
# Fix with: clang-format -i FILE...
# Usage: cmake -DROOT=<repo> -P format_check.cmake
find_program(CLANG_FORMAT NAMES clang-format-14 clang-format)
if(NOT CLANG_FORMAT)
  message(FATAL_ERROR "clang-format is not installed (Debian: apt-get install clang-format)")
endif()
execute_process(COMMAND ${CLANG_FORMAT} --version OUTPUT_VARIABLE version)
if(NOT version MATCHES "version 14\\.")
  message(FATAL_ERROR "the format check needs clang-format 14 (Debian 12's); found: ${version}")
endif()
file(GLOB_RECURSE files RELATIVE "${ROOT}"
     "${ROOT}/src/*.h" "${ROOT}/src/*.cpp" "${ROOT}/src/*.inc"
     "${ROOT}/tests/*.h" "${ROOT}/tests/*.cpp" "${ROOT}/bench/*.h" "${ROOT}/bench/*.cpp")
execute_process(COMMAND ${CLANG_FORMAT} --dry-run -Werror ${files}
                WORKING_DIRECTORY "${ROOT}" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
set(bad "")
if(NOT rc EQUAL 0)
  # One "FILE:LINE:COL: error: code should be clang-formatted" per difference.
  string(REGEX MATCHALL "[^\n:]+:[0-9]+:[0-9]+: error: code should be clang-formatted" hits "${err}")
  foreach(hit ${hits})
    string(REGEX REPLACE ":[0-9]+:[0-9]+: error:.*" "" file "${hit}")
    list(APPEND bad ${file})
  endforeach()
  list(REMOVE_DUPLICATES bad)
  if(NOT bad)
    message(FATAL_ERROR "clang-format failed:\n${err}")
  endif()
endif()
if(bad)
  list(LENGTH bad n)
  string(REPLACE ";" "\n  " listing "${bad}")
  message(FATAL_ERROR "${n} file(s) not formatted (clang-format -i FILE):\n  ${listing}")
endif()
list(LENGTH files n)
message(STATUS "format: ${n} files follow .clang-format")
