# Decides FLASHATTN_WITH_CUDA and defines flashattn_cuda_options(target), which
# gives a target our nvcc flags: explicit -gencode per architecture (so sm_90a's
# wgmma/setmaxnreg are legal), line info, and spill warnings.
set(FLASHATTN_WITH_CUDA OFF)
if(NOT FLASHATTN_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(FLASHATTN_WITH_CUDA ON)
  elseif(FLASHATTN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "FLASHATTN_CUDA=ON but no CUDA compiler was found")
  endif()
endif()

if(FLASHATTN_WITH_CUDA)
  # Architectures come from FLASHATTN_CUDA_ARCHS as -gencode flags, not from CMake.
  set(CMAKE_CUDA_ARCHITECTURES OFF)
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)  # the newest dialect CMake 3.25 knows for nvcc
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  message(STATUS "flashattn: CUDA backends ON, architectures ${FLASHATTN_CUDA_ARCHS}")

  set(FLASHATTN_GENCODE "")
  list(GET FLASHATTN_CUDA_ARCHS 0 _lowest)
  foreach(arch IN LISTS FLASHATTN_CUDA_ARCHS)
    if(arch STREQUAL _lowest)
      list(APPEND FLASHATTN_GENCODE "-gencode=arch=compute_${arch},code=[sm_${arch},compute_${arch}]")
    else()
      list(APPEND FLASHATTN_GENCODE "-gencode=arch=compute_${arch},code=sm_${arch}")
    endif()
  endforeach()
else()
  message(STATUS "flashattn: CUDA backends OFF (CPU backends only)")
endif()

function(flashattn_cuda_options target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:${FLASHATTN_GENCODE} -lineinfo --expt-relaxed-constexpr -Xptxas=-warn-spills>)
endfunction()
