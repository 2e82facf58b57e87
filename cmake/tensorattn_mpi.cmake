# Context parallelism over MPI (DESIGN.md, "Context parallelism"): the library
# tensorattn_mpi (src/dist, include/tensorattn_mpi.h) on top of tensorattn_static, the
# command line's --context-parallel (cli/mpi) and the tests run through mpirun
# (tests/mpi). Built only where MPI is found (Open MPI from Debian: scripts/setup);
# -DTA_WITH_MPI=OFF leaves it out even then. Without it every MPI test is skipped (77).
option(TA_WITH_MPI "Build context parallelism where MPI is found" ON)
set(TA_MPI_FOUND FALSE)
# Not in the Python package's build (TA_PYTHON): the module does not use it, and its
# install() rules would put libtensorattn_mpi.a and tensorattn_mpi.h into the wheel
# (site-packages/lib, site-packages/include).
if(TA_WITH_MPI AND NOT TA_PYTHON)
  find_package(MPI COMPONENTS C QUIET)
  if(MPI_C_FOUND)
    set(TA_MPI_FOUND TRUE)
  endif()
endif()
message(STATUS "tensorattn context parallelism over MPI: ${TA_MPI_FOUND}")

if(TA_MPI_FOUND)
  file(GLOB TA_DIST_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/dist/*.c)
  add_library(tensorattn_mpi STATIC ${TA_DIST_SOURCES})
  target_include_directories(tensorattn_mpi PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(tensorattn_mpi PRIVATE ${TA_WARNINGS})
  target_link_libraries(tensorattn_mpi PUBLIC tensorattn_static MPI::MPI_C)
  # installed in the CMake package as tensorattn::mpi (tensorattnConfig.cmake finds MPI
  # for it: find_package(tensorattn COMPONENTS mpi) asks for it)
  set_target_properties(tensorattn_mpi PROPERTIES EXPORT_NAME mpi)
  install(FILES include/tensorattn_mpi.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(TARGETS tensorattn_mpi EXPORT tensorattnTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()

# The command-line tool's MPI commands (cli/mpi): sdpa --context-parallel, bench
# --context-parallel. Elsewhere cli/cmd_context_parallel.c answers that MPI is not built.
function(ta_mpi_cli target)
  if(TA_MPI_FOUND)
    file(GLOB srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/cli/mpi/*.c)
    target_sources(${target} PRIVATE ${srcs})
    target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/cli/mpi)
    target_compile_definitions(${target} PRIVATE TA_WITH_MPI)
    target_link_libraries(${target} PRIVATE tensorattn_mpi)
  endif()
endfunction()

# tests/mpi: test_context_parallel on P = 1..4 ranks (oversubscribed on small machines), and
# the command line under mpirun. Open MPI as root in a container needs
# --allow-run-as-root --oversubscribe (tests/mpi/run.sh adds them for Open MPI) and
# OMPI_MCA_btl_vader_single_copy_mechanism=none. One thread per rank: up to 4 ranks share
# the machine's cores.
function(ta_mpi_tests)
  set(run sh ${PROJECT_SOURCE_DIR}/tests/mpi/run.sh)
  set(env "OMP_NUM_THREADS=1;OMPI_MCA_btl_vader_single_copy_mechanism=none")
  if(TA_SANITIZE) # Open MPI's own allocations at exit are not ours (tests/mpi/lsan.supp)
    list(APPEND env "ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0"
      "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/mpi/lsan.supp")
  endif()
  set(prog "")
  if(TA_MPI_FOUND)
    add_executable(test_context_parallel ${PROJECT_SOURCE_DIR}/tests/mpi/test_context_parallel.c
      ${PROJECT_SOURCE_DIR}/tests/mpi/context_parallel_errors.c
      ${PROJECT_SOURCE_DIR}/tests/mpi/context_parallel_variants.c)
    add_executable(test_cli_context_parallel ${PROJECT_SOURCE_DIR}/tests/mpi/test_cli_context_parallel.c)
    foreach(name test_context_parallel test_cli_context_parallel)
      target_compile_options(${name} PRIVATE ${TA_WARNINGS})
      target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)
      target_compile_definitions(${name} PRIVATE
        TA_CLI_PATH="$<TARGET_FILE:tensorattn>" TA_MPI_RUN="${PROJECT_SOURCE_DIR}/tests/mpi/run.sh"
        TA_MPIEXEC="${MPIEXEC_EXECUTABLE}" _GNU_SOURCE)
      target_link_libraries(${name} PRIVATE ta_test_support tensorattn_mpi PkgConfig::CMOCKA)
      add_dependencies(${name} tensorattn)
    endforeach()
    set(prog $<TARGET_FILE:test_context_parallel>)
    add_test(NAME cli_context_parallel COMMAND test_cli_context_parallel)
  else()
    add_test(NAME cli_context_parallel COMMAND ${run} "" 0 "")
  endif()
  set_tests_properties(cli_context_parallel PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300
    ENVIRONMENT "${env}")
  foreach(np 1 2 3 4)
    add_test(NAME context_parallel_np${np} COMMAND ${run} "${MPIEXEC_EXECUTABLE}" ${np} "${prog}")
    set_tests_properties(context_parallel_np${np} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300
      ENVIRONMENT "${env}")
  endforeach()
endfunction()
