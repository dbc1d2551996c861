# strata_cc_library(NAME name SRCS ... DEPS ... [PRIVATE_DEPS ...])
function(strata_cc_library)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${ARG_NAME} STATIC ${ARG_SRCS})
  target_include_directories(${ARG_NAME} PUBLIC ${PROJECT_SOURCE_DIR})
  target_compile_options(${ARG_NAME} PRIVATE ${STRATA_WARNINGS})
  target_link_libraries(${ARG_NAME} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

# strata_cc_binary(NAME name SRCS ... DEPS ...)
function(strata_cc_binary)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_compile_options(${ARG_NAME} PRIVATE ${STRATA_WARNINGS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS})
endfunction()

# strata_cc_test(NAME name SRCS ... DEPS ... [LABELS ...])
function(strata_cc_test)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_compile_options(${ARG_NAME} PRIVATE ${STRATA_WARNINGS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} strata_testing
                        GTest::gtest GTest::gmock GTest::gtest_main)
  gtest_discover_tests(${ARG_NAME}
    DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "${ARG_LABELS}"
               ENVIRONMENT "STRATA_BIN_DIR=${CMAKE_BINARY_DIR}/bin")
endfunction()
