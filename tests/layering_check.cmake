# Checks the code against the module table (cmake/StrataModules.cmake):
#  - every directory under src/ is a module of the table, and every module of
#    the table has a directory;
#  - a module's row names only modules above it (dependencies point one way);
#  - every #include "m/..." or <m/...> of a module m in src/<module>/ names
#    the module itself or one it may include;
#  - no file outside src/m/ and tests/m/ includes m/internal/;
#  - the dependency table in docs/architecture.md says what the table says.
# Usage: cmake -DROOT=<repo> -P layering_check.cmake
cmake_policy(SET CMP0057 NEW)
include(${ROOT}/cmake/StrataModules.cmake)

set(violations 0)
macro(violation text)
  message(SEND_ERROR "layering: ${text}")
  math(EXPR violations "${violations} + 1")
endmacro()

# The table itself: rows name only modules above them.
set(above "")
foreach(module ${STRATA_MODULES})
  foreach(dep ${STRATA_MAY_INCLUDE_${module}})
    if(NOT dep IN_LIST above)
      violation("module table: ${module} may include ${dep}, which is not above it")
    endif()
  endforeach()
  list(APPEND above ${module})
  if(NOT IS_DIRECTORY "${ROOT}/src/${module}")
    violation("module table: ${module} has no directory src/${module}")
  endif()
endforeach()

file(GLOB module_dirs LIST_DIRECTORIES true "${ROOT}/src/*")
foreach(dir ${module_dirs})
  if(NOT IS_DIRECTORY "${dir}")
    continue()
  endif()
  get_filename_component(module "${dir}" NAME)
  if(NOT module IN_LIST STRATA_MODULES)
    violation("src/${module} is not a module of the table; add it to cmake/StrataModules.cmake and docs/architecture.md")
  endif()
endforeach()

# Checks the includes of every file under ${tree}/${module}; with `modules_too`,
# also that each module included is one ${module} may include.
function(check_includes tree module modules_too)
  file(GLOB_RECURSE sources "${ROOT}/${tree}/${module}/*.h" "${ROOT}/${tree}/${module}/*.cpp"
       "${ROOT}/${tree}/${module}/*.inc")
  foreach(source ${sources})
    file(STRINGS "${source}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"][a-z_0-9]+/")
    file(RELATIVE_PATH rel "${ROOT}" "${source}")
    foreach(line ${includes})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]+)[>\"].*" "\\1" path "${line}")
      string(REGEX REPLACE "/.*" "" target "${path}")
      if(NOT target IN_LIST STRATA_MODULES)
        continue()
      endif()
      if(path MATCHES "^[a-z_0-9]+/internal/" AND NOT target STREQUAL module)
        message(SEND_ERROR "layering: ${rel} includes ${path}, private to ${target}/")
        set(found_violation TRUE PARENT_SCOPE)
      endif()
      if(modules_too AND NOT target STREQUAL module AND NOT target IN_LIST STRATA_MAY_INCLUDE_${module})
        message(SEND_ERROR "layering: ${rel} includes ${path}, but ${module}/ may not depend on ${target}/")
        set(found_violation TRUE PARENT_SCOPE)
      endif()
    endforeach()
  endforeach()
endfunction()

foreach(module ${STRATA_MODULES})
  set(found_violation FALSE)
  check_includes(src ${module} TRUE)
  if(found_violation)
    math(EXPR violations "${violations} + 1")
  endif()
endforeach()
# Tests may use any module, but only their own module's internals.
file(GLOB test_dirs LIST_DIRECTORIES true "${ROOT}/tests/*" "${ROOT}/bench/*")
foreach(dir ${test_dirs})
  if(IS_DIRECTORY "${dir}")
    get_filename_component(name "${dir}" NAME)
    get_filename_component(parent "${dir}" DIRECTORY)
    get_filename_component(tree "${parent}" NAME)
    set(found_violation FALSE)
    check_includes(${tree} ${name} FALSE)
    if(found_violation)
      math(EXPR violations "${violations} + 1")
    endif()
  endif()
endforeach()

# docs/architecture.md: each table row "| `module` | may include | ..." must
# list the modules of the table's row (in any order; "std" for none), and
# every module must have a row.
file(STRINGS "${ROOT}/docs/architecture.md" rows REGEX "^\\| `[a-z_0-9]+` \\|")
set(documented "")
foreach(row ${rows})
  string(REGEX REPLACE "^\\| `([a-z_0-9]+)` \\|([^|]*)\\|.*" "\\1" module "${row}")
  string(REGEX REPLACE "^\\| `([a-z_0-9]+)` \\|([^|]*)\\|.*" "\\2" deps "${row}")
  string(REGEX REPLACE "[ `]" "" deps "${deps}")
  string(REPLACE "," ";" deps "${deps}")
  list(REMOVE_ITEM deps std everything "")
  list(APPEND documented ${module})
  if(NOT module IN_LIST STRATA_MODULES)
    violation("docs/architecture.md lists module ${module}, which the table does not have")
    continue()
  endif()
  set(want ${STRATA_MAY_INCLUDE_${module}})
  if(module STREQUAL "cli")
    continue()  # "everything"
  endif()
  list(SORT deps)
  list(SORT want)
  if(NOT "${deps}" STREQUAL "${want}")
    violation("docs/architecture.md: ${module} may include '${deps}', the table says '${want}'")
  endif()
endforeach()
foreach(module ${STRATA_MODULES})
  if(NOT module IN_LIST documented)
    violation("docs/architecture.md has no row for module ${module}")
  endif()
endforeach()

if(violations GREATER 0)
  message(FATAL_ERROR "${violations} layering violation(s)")
endif()
message(STATUS "layering: every include follows the module table")
