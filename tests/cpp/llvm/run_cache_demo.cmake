# Runs the cache demo in two processes with one fresh cache directory: the first must compile,
# the second must load the kernel from disk. Usage: cmake -DDEMO=<exe> -DDIR=<dir> -P this-file
file(REMOVE_RECURSE "${DIR}")
foreach(run first second)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env FASTDYN_CACHE_DIR=${DIR} ${DEMO}
                  OUTPUT_VARIABLE out_${run} RESULT_VARIABLE rc)
  message(STATUS "${run} process: ${out_${run}}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${run} process failed (${rc})")
  endif()
endforeach()
if(NOT out_first MATCHES "^compiled .* result ok")
  message(FATAL_ERROR "first process should compile: ${out_first}")
endif()
if(NOT out_second MATCHES "^disk hit .*disk_hits=1 compiles=0 rejected=0.* result ok")
  message(FATAL_ERROR "second process should hit the disk cache: ${out_second}")
endif()
file(REMOVE_RECURSE "${DIR}")
