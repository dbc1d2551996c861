# Finds the pip TensorFlow that the TF op library (tensorflow) is
# built against, by asking its own tf.sysconfig.
#
# STRATA_TF_PYTHON (cache): the Python whose `tensorflow` is used. Empty (the
# default) means ${CMAKE_BINARY_DIR}/python-venv/bin/python when it exists
# (python/run_tests.sh installs tensorflow-cpu there), else python3; this is
# resolved again at every configure, so a venv made after the first
# configure is picked up.
#
# strata_find_tensorflow() sets, in the caller's scope:
#   STRATA_TF_FOUND             TRUE or FALSE
#   STRATA_TF_WHY_NOT           why not, when not found
#   STRATA_TF_PYTHON_USED       the interpreter asked
#   STRATA_TF_VERSION           tf.__version__
#   STRATA_TF_INCLUDE_DIRS      the -I directories of get_compile_flags()
#   STRATA_TF_DEFINITIONS       its -D definitions (without -D)
#   STRATA_TF_COMPILE_OPTIONS   its other flags, except the -std flag
#   STRATA_TF_FRAMEWORK_LIBRARY libtensorflow_framework.so.N, full path
# Importing TensorFlow takes seconds, so the answer is cached and asked again
# only when the interpreter or the installed tensorflow package changes.

set(STRATA_TF_PYTHON "" CACHE FILEPATH
    "Python whose pip TensorFlow the TF op library is built against (empty: BUILD_DIR/python-venv/bin/python if present, else python3)")

function(strata_find_tensorflow)
  set(STRATA_TF_FOUND FALSE PARENT_SCOPE)
  set(python "${STRATA_TF_PYTHON}")
  if(NOT python)
    if(EXISTS "${CMAKE_BINARY_DIR}/python-venv/bin/python")
      set(python "${CMAKE_BINARY_DIR}/python-venv/bin/python")
    else()
      find_program(STRATA_TF_PYTHON3 python3)
      set(python "${STRATA_TF_PYTHON3}")
    endif()
  endif()
  set(STRATA_TF_PYTHON_USED "${python}" PARENT_SCOPE)
  if(NOT python OR NOT EXISTS "${python}")
    set(STRATA_TF_WHY_NOT "no Python interpreter ('${python}')" PARENT_SCOPE)
    return()
  endif()

  # Where the package is, without importing it (fast).
  execute_process(
    COMMAND "${python}" -c
      "import importlib.util as u; s = u.find_spec('tensorflow'); print(s.origin if s and s.origin else '')"
    OUTPUT_VARIABLE origin OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE rc ERROR_QUIET TIMEOUT 60)
  if(NOT rc EQUAL 0 OR NOT origin)
    set(STRATA_TF_WHY_NOT "${python} cannot import tensorflow" PARENT_SCOPE)
    return()
  endif()
  file(TIMESTAMP "${origin}" stamp "%s" UTC)
  set(key "${python}|${origin}|${stamp}")

  if(NOT key STREQUAL "${STRATA_TF_CACHE_KEY}")
    execute_process(
      COMMAND ${CMAKE_COMMAND} -E env TF_CPP_MIN_LOG_LEVEL=3
              "${python}" -c
              "import tensorflow as tf; s = tf.sysconfig; print('@version=' + tf.__version__); print('@compile=' + ';'.join(s.get_compile_flags())); print('@link=' + ';'.join(s.get_link_flags()))"
      OUTPUT_VARIABLE answer RESULT_VARIABLE rc ERROR_VARIABLE errors
      TIMEOUT 300)
    if(NOT rc EQUAL 0)
      string(STRIP "${errors}" errors)
      string(REGEX REPLACE ".*\n" "" last_error "${errors}")
      set(STRATA_TF_WHY_NOT
          "importing tensorflow with ${python} failed: ${last_error}"
          PARENT_SCOPE)
      return()
    endif()
    # Marked lines, in case importing tensorflow prints anything else.
    string(REGEX MATCH "@version=([^\n]*)" matched "${answer}")
    set(version "${CMAKE_MATCH_1}")
    string(REGEX MATCH "@compile=([^\n]*)" matched "${answer}")
    set(compile_flags "${CMAKE_MATCH_1}")
    string(REGEX MATCH "@link=([^\n]*)" matched "${answer}")
    set(link_flags "${CMAKE_MATCH_1}")

    set(includes)
    set(definitions)
    set(options)
    foreach(flag IN LISTS compile_flags)
      if(flag MATCHES "^-I(.+)$")
        list(APPEND includes "${CMAKE_MATCH_1}")
      elseif(flag MATCHES "^-D(.+)$")
        list(APPEND definitions "${CMAKE_MATCH_1}")
      elseif(flag MATCHES "^--?std=")
        # The target asks for C++17 itself (CXX_STANDARD).
      else()
        list(APPEND options "${flag}")
      endif()
    endforeach()
    set(lib_dirs)
    set(framework "")
    foreach(flag IN LISTS link_flags)
      if(flag MATCHES "^-L(.+)$")
        list(APPEND lib_dirs "${CMAKE_MATCH_1}")
      elseif(flag MATCHES "^-l:(.+)$")
        foreach(dir IN LISTS lib_dirs)
          if(EXISTS "${dir}/${CMAKE_MATCH_1}")
            set(framework "${dir}/${CMAKE_MATCH_1}")
          endif()
        endforeach()
      endif()
    endforeach()
    if(NOT version OR NOT includes OR NOT framework)
      set(STRATA_TF_WHY_NOT
          "tf.sysconfig of ${python} gave no include directory or framework library"
          PARENT_SCOPE)
      return()
    endif()
    set(STRATA_TF_CACHE_KEY "${key}" CACHE INTERNAL "")
    set(STRATA_TF_CACHED_VERSION "${version}" CACHE INTERNAL "")
    set(STRATA_TF_CACHED_INCLUDE_DIRS "${includes}" CACHE INTERNAL "")
    set(STRATA_TF_CACHED_DEFINITIONS "${definitions}" CACHE INTERNAL "")
    set(STRATA_TF_CACHED_COMPILE_OPTIONS "${options}" CACHE INTERNAL "")
    set(STRATA_TF_CACHED_FRAMEWORK "${framework}" CACHE INTERNAL "")
  endif()

  set(STRATA_TF_FOUND TRUE PARENT_SCOPE)
  set(STRATA_TF_VERSION "${STRATA_TF_CACHED_VERSION}" PARENT_SCOPE)
  set(STRATA_TF_INCLUDE_DIRS "${STRATA_TF_CACHED_INCLUDE_DIRS}" PARENT_SCOPE)
  set(STRATA_TF_DEFINITIONS "${STRATA_TF_CACHED_DEFINITIONS}" PARENT_SCOPE)
  set(STRATA_TF_COMPILE_OPTIONS "${STRATA_TF_CACHED_COMPILE_OPTIONS}"
      PARENT_SCOPE)
  set(STRATA_TF_FRAMEWORK_LIBRARY "${STRATA_TF_CACHED_FRAMEWORK}" PARENT_SCOPE)
endfunction()
