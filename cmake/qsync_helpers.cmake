# qsync_helpers: one helper per kind of target, in the manner of abseil's absl_cc_library.
#   qsync_cc_library(NAME kernels SRCS a.cpp HDRS a.h DEPS dnnl PUBLIC_DEPS ...) -> target qsync_kernels, alias qsync::kernels
#   qsync_cc_test(NAME gemm_test SRCS gemm_test.cpp DEPS qsync::kernels [LABELS l] [RESOURCE_LOCK r])
#                                                                              -> gtest binary registered with ctest
#   qsync_cc_binary(NAME qsync-bench-gemm SRCS main.cpp DEPS ...)             -> build/bin/<NAME>

# QSYNC_WERROR=OFF (scripts/fuzz.sh, scripts/sanitize.sh: clang warns about other things than gcc)
# keeps the warnings but not as errors.
set(QSYNC_WARNINGS -Wall -Wextra)
if(QSYNC_WERROR)
  list(APPEND QSYNC_WARNINGS -Werror)
endif()

# Precompiled headers: nlohmann/json (and GoogleTest in tests) cost about 3 s of every
# translation unit that includes them; a holder target compiles them once and the targets of
# its kind reuse the result (same flags: -O level, PIC or PIE). A header that cannot be reused
# only warns (-Winvalid-pch) and the compiler reads the text instead.
#   qsync_pch_holder(NAME qsync_pch_library KIND library|executable [TEST])
#   then set(QSYNC_PCH_LIBRARY <holder>) / set(QSYNC_PCH_TEST <holder>) in that directory scope.
function(qsync_pch_holder)
  cmake_parse_arguments(Q "TEST" "NAME;KIND" "" ${ARGN})
  if(Q_KIND STREQUAL "executable")
    add_executable(${Q_NAME} EXCLUDE_FROM_ALL ${PROJECT_SOURCE_DIR}/cmake/pch_anchor_main.cpp)
  else()
    add_library(${Q_NAME} OBJECT EXCLUDE_FROM_ALL ${PROJECT_SOURCE_DIR}/cmake/pch_anchor.cpp)
  endif()
  # -fopenmp everywhere a header is reused: most targets get it through qsync::kernels, and a
  # header compiled without _OPENMP cannot serve them (or the other way round).
  target_compile_options(${Q_NAME} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${QSYNC_WARNINGS} -fopenmp>)
  target_link_libraries(${Q_NAME} PRIVATE nlohmann_json::nlohmann_json)
  set(headers <nlohmann/json.hpp> <string> <vector> <map> <memory> <functional> <stdexcept>)
  if(Q_TEST)
    target_link_libraries(${Q_NAME} PRIVATE GTest::gtest)
    list(APPEND headers <gtest/gtest.h>)
  endif()
  foreach(h IN LISTS headers)
    target_precompile_headers(${Q_NAME} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${h}>")
  endforeach()
endfunction()

function(qsync_reuse_pch target holder)
  if(QSYNC_PRECOMPILED_HEADERS AND holder AND TARGET ${holder})
    target_precompile_headers(${target} REUSE_FROM ${holder})
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-error=invalid-pch -fopenmp>)
  endif()
endfunction()

function(qsync_cc_library)
  cmake_parse_arguments(Q "" "NAME" "SRCS;HDRS;DEPS;PUBLIC_DEPS" ${ARGN})
  add_library(qsync_${Q_NAME} STATIC ${Q_SRCS} ${Q_HDRS})
  add_library(qsync::${Q_NAME} ALIAS qsync_${Q_NAME})
  target_include_directories(qsync_${Q_NAME} PUBLIC ${PROJECT_SOURCE_DIR})
  target_compile_options(qsync_${Q_NAME} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${QSYNC_WARNINGS}>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror --Werror=all-warnings>)
  target_link_libraries(qsync_${Q_NAME} PRIVATE ${Q_DEPS} PUBLIC ${Q_PUBLIC_DEPS})
  qsync_reuse_pch(qsync_${Q_NAME} "${QSYNC_PCH_LIBRARY}")
endfunction()

function(qsync_cc_binary)
  cmake_parse_arguments(Q "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${Q_NAME} ${Q_SRCS})
  target_compile_options(${Q_NAME} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${QSYNC_WARNINGS}>)
  target_link_libraries(${Q_NAME} PRIVATE ${Q_DEPS})
endfunction()

function(qsync_cc_test)
  cmake_parse_arguments(Q "" "NAME;RESOURCE_LOCK;COST" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${Q_NAME} ${Q_SRCS})
  set_target_properties(${Q_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_compile_options(${Q_NAME} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${QSYNC_WARNINGS}>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror>)
  target_link_libraries(${Q_NAME} PRIVATE ${Q_DEPS} GTest::gtest GTest::gtest_main)
  qsync_reuse_pch(${Q_NAME} "${QSYNC_PCH_TEST}")
  # A GTEST_SKIP'd test (e.g. CUDA with no GPU) is reported by ctest as skipped, not passed.
  # Labels are a list: escape the separators so gtest_discover_tests keeps them together.
  string(REPLACE ";" "\\;" labels "${Q_LABELS}")
  # RESOURCE_LOCK: tests holding the same lock never run at once (e.g. fixed ports).
  set(lock)
  if(Q_RESOURCE_LOCK)
    set(lock RESOURCE_LOCK ${Q_RESOURCE_LOCK})
  endif()
  # COST: roughly the seconds of its longest test. ctest starts costly tests first; a fresh build
  # has no timing history, and a minute-long test started last would make the whole run's tail.
  if(Q_COST)
    list(APPEND lock COST ${Q_COST})
  endif()
  gtest_discover_tests(${Q_NAME}
    PROPERTIES SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]" LABELS "${labels}" ${lock}
    DISCOVERY_TIMEOUT 60)
endfunction()
