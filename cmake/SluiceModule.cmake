# How each folder under src/ builds (src/<module>/CMakeLists.txt):
#
#   sluice_library(sluice_<module> [PIC] SOURCES...)
#     The module's one library, of its non-test sources. Its users include its headers by their
#     path under src/ ("backend/memory/memory_store.h") and the public ones under include/
#     ("sluice/limit.h"). The folder then links it to the sluice libraries its row of
#     scripts/check_layers.sh allows, and nothing else of ours. PIC: the module goes into
#     libsluice.so too (src/library/), so it is position-independent; -fno-semantic-interposition
#     keeps the code what it is without -fPIC (calls within the library may still be inlined;
#     nothing interposes on them).
#
#   sluice_test(NAME [NO_DISCOVER] SOURCES... LINK libraries...)
#     A gtest binary of a module's tests (one per folder: fewer links), linked to the module's
#     library and to what its row's test column allows (LINK), the unit tests' kit
#     (sluice_testing, tests/support/: it needs nothing but the public types) and GoogleTest.
#     Each test becomes a ctest test labelled `unit` (NO_DISCOVER: the caller runs
#     gtest_discover_tests itself). Compiled at -Og in a release build (-O0 in the fuzz preset),
#     from a precompiled header of GoogleTest and GoogleMock where the compiler is GCC, and as
#     one translation unit (below).
#
# The tests' precompiled header: parsing GoogleTest and GoogleMock is about a second of every test
# source's 1.5-8 s (GCC, this 2-core VM), so sluice_test_pch parses them once, with the tests' own
# flags, and every test binary of a GCC build starts from it (-Winvalid-pch: a header the flags do
# not fit is an error, not a silent slow path). Not in a clang build (the fuzz preset: three test
# binaries) nor in the lint preset, which turns precompiled headers off
# (CMAKE_DISABLE_PRECOMPILE_HEADERS) so that clang-tidy parses each source as written. Headers of
# other libraries were measured and left out: GCC's of Asio and Beast is 240 MB, read whole by
# every source, and saved under half a second of each.
#
# A test binary is one translation unit (a unity build, SLUICE_UNITY_TESTS; off in the lint
# preset, which parses each file as written): its sources then share the parse of their headers
# (Asio, Beast, gRPC, the code under test) and the instantiation of their templates. The release
# build's tests took 262 CPU-s as 93 sources and take 119 as 19 units (this 2-core VM). So a name
# at a test file's namespace scope must not be one that another test file of the same binary
# defines differently: what tests share is in the kit (tests/support/units.h: kSecond, kT0...) or
# a module's *_testing.h; the rest is named for its file (kWholeMinute, TlsClient).
#
# SLUICE_LINK_CHECK (tests/layers_build_test.sh): every module library is a shared library linked
# with -Wl,--no-undefined, so a library that calls into a module it does not link (one its row
# does not allow) fails to link; a static library never would.
option(SLUICE_UNITY_TESTS "Compile each test binary as one translation unit (unity build)" ON)
option(SLUICE_LINK_CHECK "Build each module library shared with --no-undefined (layer check)" OFF)

function(sluice_library name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "PIC" "" "")
  if(SLUICE_LINK_CHECK)
    add_library(${name} SHARED ${arg_UNPARSED_ARGUMENTS})
    target_link_options(${name} PRIVATE -Wl,--no-undefined)
  else()
    add_library(${name} STATIC ${arg_UNPARSED_ARGUMENTS})
  endif()
  target_include_directories(${name}
    PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include
    PRIVATE ${XXHASH_INCLUDE_DIR})
  if(arg_PIC)
    set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
    target_compile_options(${name} PRIVATE -fno-semantic-interposition)
  endif()
endfunction()

set(SLUICE_TEST_OPTIMIZE $<$<CONFIG:Release>:-Og>)
if(SLUICE_FUZZ)
  # The fuzz preset's sanitized unit tests: their own code at -O0 compiles in half the time of
  # -O1 under ASan; the code under test, the module's library, keeps the preset's -O1.
  set(SLUICE_TEST_OPTIMIZE -O0)
endif()

function(sluice_test_pch_target)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    return()
  endif()
  add_library(sluice_test_pch OBJECT ${PROJECT_SOURCE_DIR}/tests/support/pch.cc)
  target_link_libraries(sluice_test_pch PRIVATE GTest::gtest GTest::gmock)
  target_compile_options(sluice_test_pch PRIVATE ${SLUICE_TEST_OPTIMIZE})
  target_precompile_headers(sluice_test_pch PRIVATE <gtest/gtest.h> <gmock/gmock.h>)
endfunction()

function(sluice_test name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "NO_DISCOVER" "" "SOURCES;LINK")
  add_executable(${name} ${arg_SOURCES})
  target_link_libraries(${name} PRIVATE ${arg_LINK} sluice_testing GTest::gtest GTest::gmock
    GTest::gtest_main)
  # The kit (tests/support/, "tests/support/temp_dir.h") by its path from the repository's root.
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR} ${XXHASH_INCLUDE_DIR})
  # In a release build the tests' own code is compiled at -Og, not -O3: it is half of what the
  # build compiles, -O3 doubles its compile time, and no test measures speed (bench/ does). The
  # code under test is the module's library, at the build's own level.
  target_compile_options(${name} PRIVATE ${SLUICE_TEST_OPTIMIZE})
  if(SLUICE_UNITY_TESTS)
    set_target_properties(${name} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 0)
  endif()
  if(TARGET sluice_test_pch)
    target_precompile_headers(${name} REUSE_FROM sluice_test_pch)
  endif()
  if(NOT arg_NO_DISCOVER)
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS unit)
  endif()
endfunction()
