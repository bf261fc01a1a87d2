# Proves layering_check.cmake refuses what it must: builds a small tree with
# the real module table and docs, one violation of each kind, and checks the
# check fails naming each of them.
# Usage: cmake -DROOT=<repo> -DWORK=<scratch dir> -P layering_selftest.cmake
include(${ROOT}/cmake/StrataModules.cmake)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}/cmake" "${WORK}/docs" "${WORK}/tests/server")
file(COPY "${ROOT}/cmake/StrataModules.cmake" DESTINATION "${WORK}/cmake")
file(COPY "${ROOT}/docs/architecture.md" DESTINATION "${WORK}/docs")
foreach(module ${STRATA_MODULES})
  file(MAKE_DIRECTORY "${WORK}/src/${module}")
endforeach()
# An upward include written with angle brackets.
file(WRITE "${WORK}/src/model/upward.h" "#include <gateway/gateway.h>\n")
# Another module's private header, from src/ and from tests/.
file(WRITE "${WORK}/src/server/private.cpp" "#include \"gateway/internal/flight.h\"\n")
file(WRITE "${WORK}/tests/server/private_test.cpp" "#include \"engine/internal/x.h\"\n")
# A directory that is not a module.
file(MAKE_DIRECTORY "${WORK}/src/stray")

execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${WORK} -P ${ROOT}/tests/layering_check.cmake
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REGEX REPLACE "[ \t\r\n]+" " " text "${out} ${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "layering_check passed a tree with violations:\n${out}${err}")
endif()
foreach(expected
    "src/model/upward.h includes gateway/gateway.h, but model/ may not depend on gateway/"
    "src/server/private.cpp includes gateway/internal/flight.h, private to gateway/"
    "tests/server/private_test.cpp includes engine/internal/x.h, private to engine/"
    "src/stray is not a module of the table")
  string(FIND "${text}" "${expected}" at)
  if(at LESS 0)
    message(FATAL_ERROR "layering_check did not report: ${expected}\nIt said:\n${out}${err}")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK}")
message(STATUS "layering_check refuses every kind of violation")
