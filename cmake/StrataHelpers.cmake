# Build helpers shared by every module, test and benchmark.

# Flags for strata's own code (third-party headers are included as SYSTEM).
set(STRATA_WARNINGS -Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wpedantic -Werror)

function(strata_apply_common target)
  target_compile_options(${target} PRIVATE ${STRATA_WARNINGS})
  if(STRATA_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer
                                             -fno-sanitize-recover=undefined)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

include(StrataModules)

# The strata_<module> libraries a module links: those of the modules it may
# include (cmake/StrataModules.cmake).
function(strata_module_libraries name out)
  if(NOT name IN_LIST STRATA_MODULES)
    message(FATAL_ERROR "module '${name}' is not in cmake/StrataModules.cmake")
  endif()
  set(libs "")
  foreach(dep ${STRATA_MAY_INCLUDE_${name}})
    list(APPEND libs strata_${dep})
  endforeach()
  set(${out} ${libs} PARENT_SCOPE)
endfunction()

# strata_module(NAME SOURCES ... [DEPS ...] [PRIVATE_DEPS ...] [NO_UNITY])
# Declares the static library strata_<NAME>; includes are relative to src/.
# It links the libraries of the modules the module table lets it include;
# DEPS and PRIVATE_DEPS name third-party libraries only. NO_UNITY: the
# module's files cannot share a unit (STRATA_UNITY_MODULES).
function(strata_module name)
  cmake_parse_arguments(ARG "NO_UNITY" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  foreach(dep ${ARG_DEPS} ${ARG_PRIVATE_DEPS})
    if(dep MATCHES "^strata_")
      message(FATAL_ERROR "strata_module(${name}): ${dep} comes from the module table, not DEPS")
    endif()
  endforeach()
  strata_module_libraries(${name} modules)
  add_library(strata_${name} STATIC ${ARG_SOURCES})
  target_include_directories(strata_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(strata_${name} PUBLIC ${modules} ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  strata_apply_common(strata_${name})
  if(STRATA_UNITY_MODULES AND NOT ARG_NO_UNITY)
    set_target_properties(strata_${name} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 4)
    # A unit includes the .cpp files, so GCC judges their types as if they
    # were in headers; in a .cpp an anonymous-namespace member type is fine.
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      target_compile_options(strata_${name} PRIVATE -Wno-subobject-linkage)
    endif()
  endif()
endfunction()

# strata_test(NAME SOURCES ... DEPS ... [LABELS ...])
# A GoogleTest executable registered with ctest. Tests run with the source
# directory as working directory so that ../shared resolves next to it.
function(strata_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} strata_testing GTest::gtest GTest::gtest_main)
  strata_apply_common(${name})
  set_target_properties(${name} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 4)
  # The test code itself is compiled at -Og: it is most of the build's
  # compile time and none of its run time (GCC compiles these
  # gtest/JSON/Asio-heavy files at -Og in up to half the time of -O1); the code
  # under test is the modules' libraries, compiled with the build type's own
  # optimisation. Under the sanitizers, at -O0: there ASan's instrumentation
  # makes -Og cost a third more than -O0 (server_test: 27.6 s against 20.8 s),
  # while without them the two cost the same.
  if(STRATA_SANITIZE)
    target_compile_options(${name} PRIVATE -O0)
  elseif(CMAKE_BUILD_TYPE MATCHES "^(Release|RelWithDebInfo)$")
    target_compile_options(${name} PRIVATE -Og)
  endif()
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}")
  if("unit" IN_LIST ARG_LABELS AND TARGET strata_unit_tests)
    add_dependencies(strata_unit_tests ${name})
  endif()
  if(TARGET strata_tests)
    add_dependencies(strata_tests ${name})
  endif()
  if(("integration" IN_LIST ARG_LABELS OR "golden" IN_LIST ARG_LABELS)
     AND TARGET strata_release_tests)
    add_dependencies(strata_release_tests ${name})
  endif()
endfunction()

# strata_bench(NAME SOURCES ... DEPS ...): a Google Benchmark executable.
function(strata_bench name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark)
  strata_apply_common(${name})
endfunction()
