# Installs the package from BUILD_DIR into WORK_DIR/prefix and builds its consumers against it: examples/consumer
# (CXX only: its configure fails if the package enabled CUDA), examples/consumer_cuda (the `cuda` component,
# where nvcc exists), a host program through pkg-config (where pkg-config exists), and the C API hosts
# examples/c_host and examples/frame_loop (dsv41::c). Each one then runs. Without a GPU the CUDA consumers are only
# built, as device-debug builds (-G: neither host nor device code optimized; ~66 CPU-s each against ~114 for
# Release): what is checked, the package's `cuda` component (flags, CCCL, links) compiling a model, is the same.
# The pkg-config host is built at -O0 (a shorter compile; the tiny fixture runs in well under a second).
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "install failed")
endif()
# build_consumer(name [cache settings...]): Release unless the settings say otherwise.
function(build_consumer name)
  set(settings -DCMAKE_BUILD_TYPE=Release ${ARGN})
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/${name} -B ${WORK_DIR}/${name}
                          -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix ${settings} RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "configuring ${name} failed")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/${name} -j 2 RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "building ${name} failed")
  endif()
endfunction()
function(run_consumer exe)
  execute_process(COMMAND ${exe} ${SOURCE_DIR}/tests/data/golden/tiny-ced RESULT_VARIABLE rc OUTPUT_VARIABLE out)
  message("${out}")
  if(rc)
    message(FATAL_ERROR "${exe} failed")
  endif()
endfunction()

build_consumer(consumer)
run_consumer(${WORK_DIR}/consumer/consumer_host)

find_program(NVCC nvcc HINTS /usr/local/cuda/bin)
if(NVCC)
  set(cuda_settings)
  if(NOT EXISTS /dev/nvidia0)  # built, not run
    set(cuda_settings -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CUDA_FLAGS_DEBUG=-G)
  endif()
  build_consumer(consumer_cuda ${cuda_settings})
  build_consumer(multi_gpu ${cuda_settings})  # builds its program only where NCCL is
  if(EXISTS /dev/nvidia0)
    run_consumer(${WORK_DIR}/consumer_cuda/consumer_cuda)
    if(EXISTS ${WORK_DIR}/multi_gpu/multi_gpu)
      run_consumer(${WORK_DIR}/multi_gpu/multi_gpu)
    endif()
  else()
    message("consumer_cuda built; not run (no GPU)")
  endif()
else()
  message("no nvcc: the CUDA consumer is skipped")
endif()

find_program(PKG_CONFIG pkg-config)
find_program(CXX_COMPILER NAMES c++ g++)
if(PKG_CONFIG AND CXX_COMPILER)
  set(ENV{PKG_CONFIG_PATH} "${WORK_DIR}/prefix/share/pkgconfig")
  execute_process(COMMAND ${PKG_CONFIG} --cflags --libs dsv41 OUTPUT_VARIABLE flags RESULT_VARIABLE rc
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(rc)
    message(FATAL_ERROR "pkg-config does not find dsv41")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  execute_process(COMMAND ${CXX_COMPILER} -O0 ${SOURCE_DIR}/examples/consumer/main.cpp ${flags}
                          -o ${WORK_DIR}/consumer_pkgconfig RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "building through pkg-config failed (flags: ${flags})")
  endif()
  run_consumer(${WORK_DIR}/consumer_pkgconfig)
endif()

# The C API from the prefix (dsv41::c): the C11 host answers on the bundled model, the frame loop keeps its budget.
build_consumer(c_host)
execute_process(COMMAND ${WORK_DIR}/c_host/c_host ${SOURCE_DIR}/models/dsv41-tiny-py "Write a loop" 4
                RESULT_VARIABLE rc OUTPUT_VARIABLE out)
message("${out}")
if(rc OR NOT out MATCHES "\\[cpu\\] [0-9]+ prompt tokens, [1-4] generated")
  message(FATAL_ERROR "the installed c_host failed")
endif()
build_consumer(frame_loop)
execute_process(COMMAND ${WORK_DIR}/frame_loop/frame_loop ${SOURCE_DIR}/models/dsv41-tiny-py 1 4000
                RESULT_VARIABLE rc OUTPUT_VARIABLE out)
message("${out}")
if(rc OR NOT out MATCHES "within budget \\+ one token at p99: yes")
  message(FATAL_ERROR "the installed frame_loop failed")
endif()
