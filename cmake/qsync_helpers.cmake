# qsync_helpers: one helper per kind of target, in the manner of abseil's absl_cc_library.
#   qsync_cc_library(NAME kernels SRCS a.cpp HDRS a.h DEPS dnnl PUBLIC_DEPS ...) -> target qsync_kernels, alias qsync::kernels
#   qsync_cc_test(NAME gemm_test SRCS gemm_test.cpp DEPS qsync::kernels [LABELS l] [RESOURCE_LOCK r])
#                                                                              -> gtest binary registered with ctest
#   qsync_cc_binary(NAME qsync-bench-gemm SRCS main.cpp DEPS ...)             -> build/bin/<NAME>

set(QSYNC_WARNINGS -Wall -Wextra -Werror)

function(qsync_cc_library)
  cmake_parse_arguments(Q "" "NAME" "SRCS;HDRS;DEPS;PUBLIC_DEPS" ${ARGN})
  add_library(qsync_${Q_NAME} STATIC ${Q_SRCS} ${Q_HDRS})
  add_library(qsync::${Q_NAME} ALIAS qsync_${Q_NAME})
  target_include_directories(qsync_${Q_NAME} PUBLIC ${PROJECT_SOURCE_DIR})
  target_compile_options(qsync_${Q_NAME} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${QSYNC_WARNINGS}>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror --Werror=all-warnings>)
  target_link_libraries(qsync_${Q_NAME} PRIVATE ${Q_DEPS} PUBLIC ${Q_PUBLIC_DEPS})
endfunction()

function(qsync_cc_binary)
  cmake_parse_arguments(Q "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${Q_NAME} ${Q_SRCS})
  target_compile_options(${Q_NAME} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${QSYNC_WARNINGS}>)
  target_link_libraries(${Q_NAME} PRIVATE ${Q_DEPS})
endfunction()

function(qsync_cc_test)
  cmake_parse_arguments(Q "" "NAME;RESOURCE_LOCK" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${Q_NAME} ${Q_SRCS})
  set_target_properties(${Q_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_compile_options(${Q_NAME} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${QSYNC_WARNINGS}>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror>)
  target_link_libraries(${Q_NAME} PRIVATE ${Q_DEPS} GTest::gtest GTest::gtest_main)
  # A GTEST_SKIP'd test (e.g. CUDA with no GPU) is reported by ctest as skipped, not passed.
  # Labels are a list: escape the separators so gtest_discover_tests keeps them together.
  string(REPLACE ";" "\\;" labels "${Q_LABELS}")
  # RESOURCE_LOCK: tests holding the same lock never run at once (e.g. fixed ports).
  set(lock)
  if(Q_RESOURCE_LOCK)
    set(lock RESOURCE_LOCK ${Q_RESOURCE_LOCK})
  endif()
  gtest_discover_tests(${Q_NAME}
    PROPERTIES SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]" LABELS "${labels}" ${lock}
    DISCOVERY_TIMEOUT 60)
endfunction()
