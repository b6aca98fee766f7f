# CUDA is optional. KVC_WITH_CUDA=AUTO builds the CUDA copy engine when nvcc is found,
# ON requires it, OFF skips it. The simulated backend is always built.
set(KVC_HAVE_CUDA OFF)
if(NOT KVC_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)   # H100/H200; CUDA 13 rejects < 75, native needs a GPU
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(KVC_HAVE_CUDA ON)
    # CMake 3.25 knows no C++20 flag for nvcc, and kvc_proto requires cxx_std_20 (so does any
    # .cu target linking it): nvcc 13 takes -std=c++20 with g++ 12, so tell CMake.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
  elseif(KVC_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KVC_WITH_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
endif()
message(STATUS "kvconnect: CUDA copy engine ${KVC_HAVE_CUDA}")
