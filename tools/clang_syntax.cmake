# cmake -DBUILD=<build dir> -DCLANG=<clang> -P tools/clang_syntax.cmake
# Every C source of the build (its compile_commands.json), parsed by clang with the build's
# own flags plus -fsyntax-only -Werror: the project must build with clang as with gcc.
# (Session 34: two CLI files called clock_gettime without asking for POSIX; gcc's -fopenmp
# implies _REENTRANT, hence a POSIX level, and hid it; clang's does not.) Run by
# tools/clang_syntax.sh, which skips the test where clang is missing.
file(READ "${BUILD}/compile_commands.json" db)
string(JSON count LENGTH "${db}")
math(EXPR last "${count} - 1")
set(failed "")
foreach(i RANGE ${last})
  string(JSON dir GET "${db}" ${i} directory)
  string(JSON cmd GET "${db}" ${i} command)
  string(JSON src GET "${db}" ${i} file)
  separate_arguments(words UNIX_COMMAND "${cmd}")
  list(POP_FRONT words) # the build's compiler
  set(args "")
  set(skip OFF)
  foreach(w IN LISTS words)
    if(skip)
      set(skip OFF)
    elseif(w STREQUAL "-o")
      set(skip ON)
    elseif(NOT w STREQUAL "-c")
      list(APPEND args "${w}")
    endif()
  endforeach()
  execute_process(COMMAND ${CLANG} -fsyntax-only -Werror ${args}
    WORKING_DIRECTORY "${dir}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message("${out}")
    list(APPEND failed "${src}")
  endif()
endforeach()
list(LENGTH failed nfailed)
if(nfailed GREATER 0)
  list(JOIN failed "\n  " names)
  message(FATAL_ERROR "clang (${CLANG}) does not compile ${nfailed} of ${count} sources:\n  ${names}")
endif()
message(STATUS "clang (${CLANG}) compiles all ${count} sources of the build")
