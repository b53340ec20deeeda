# Link against the torch wheel installed for ${Python_EXECUTABLE} directly. NB: find_package(Torch)
# drags in CUDA/MKL discovery that differs between the CPU and CUDA wheels; we need only headers
# and four shared libraries.
execute_process(
  COMMAND ${Python_EXECUTABLE} -c "import os, torch; print(os.path.dirname(torch.__file__)); print(int(torch._C._GLIBCXX_USE_CXX11_ABI)); print(torch.__version__.split('+')[0])"
  OUTPUT_VARIABLE _torch_info OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _torch_rc)
if(NOT _torch_rc EQUAL 0)
  message(FATAL_ERROR "fastdyn needs torch importable from ${Python_EXECUTABLE}")
endif()
string(REPLACE "\n" ";" _torch_info "${_torch_info}")
list(GET _torch_info 0 TORCH_DIR)
list(GET _torch_info 1 TORCH_CXX11_ABI)
list(GET _torch_info 2 TORCH_VERSION)
set(TORCH_LIB_DIR ${TORCH_DIR}/lib)

add_library(fastdyn_torch INTERFACE)
target_include_directories(fastdyn_torch SYSTEM INTERFACE ${TORCH_DIR}/include ${TORCH_DIR}/include/torch/csrc/api/include)
target_compile_definitions(fastdyn_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=${TORCH_CXX11_ABI})
target_link_libraries(fastdyn_torch INTERFACE ${TORCH_LIB_DIR}/libc10.so ${TORCH_LIB_DIR}/libtorch_cpu.so ${TORCH_LIB_DIR}/libtorch.so)
target_link_options(fastdyn_torch INTERFACE "-Wl,-rpath,${TORCH_LIB_DIR}")
# NB: torch 2.14's headers use C++20 concepts (TensorBase.h); older ones build as C++17. The
# requirement travels to every target that links torch.
if(TORCH_VERSION VERSION_GREATER_EQUAL 2.14)
  target_compile_features(fastdyn_torch INTERFACE cxx_std_20)
endif()
add_library(fastdyn::torch ALIAS fastdyn_torch)

add_library(fastdyn_torch_python INTERFACE)
target_link_libraries(fastdyn_torch_python INTERFACE fastdyn_torch ${TORCH_LIB_DIR}/libtorch_python.so)
add_library(fastdyn::torch_python ALIAS fastdyn_torch_python)
