# Shared precompiled headers. Every MLIR TU spends 4-6 s of its 5-25 s
# parsing the same MLIR/LLVM headers; compiling them once (pch/MLIR.h, about
# 25 s) and reusing the result saves that per TU. Two donors, one per
# header set: MLIR (dialects, passes, translations, tools) and Test
# (GoogleTest). A target opts in with pipeforge_use_pch(<target> MLIR|Test).
# The plain C++ targets (schedule library, runtime) take none: measured,
# loading a standard-library + nlohmann/json PCH costs their small TUs more
# (+0.5 s each) than it saves; their time is code generation.
#
# A reused PCH must be built with the reusing targets' flags: every target
# here takes the tree-wide flags only (none of them is position-independent
# or defines macros of its own). -DPIPEFORGE_ENABLE_PCH=OFF compiles
# without.
option(PIPEFORGE_ENABLE_PCH "Precompile the MLIR and GoogleTest headers" ON)

set(_pf_pch_dir ${CMAKE_CURRENT_LIST_DIR}/pch)
function(_pipeforge_pch_donor kind)
  add_library(PipeForgePch${kind} OBJECT ${_pf_pch_dir}/Empty.cpp)
  target_precompile_headers(PipeForgePch${kind} PRIVATE ${_pf_pch_dir}/${kind}.h)
  target_link_libraries(PipeForgePch${kind} PRIVATE ${ARGN})
endfunction()

if(PIPEFORGE_ENABLE_PCH)
  _pipeforge_pch_donor(MLIR)
endif()

function(pipeforge_use_pch target kind)
  if(NOT PIPEFORGE_ENABLE_PCH)
    return()
  endif()
  if(kind STREQUAL "Test" AND NOT TARGET PipeForgePchTest)
    _pipeforge_pch_donor(Test GTest::gtest)
  endif()
  target_precompile_headers(${target} REUSE_FROM PipeForgePch${kind})
endfunction()
