# The build-time half of lang/ (included by lang/CMakeLists.txt unless
# TESSERA_GENERATED_FROM names another build's output): the Halide
# descriptions (tessera_lang_defs, linking libHalide), the two tools built from
# them, and the commands that run the tools into GEN_DIR. They write the files
# lang/CMakeLists.txt lists in _gen_srcs and _gen_objs.

file(MAKE_DIRECTORY ${GEN_DIR})

# ---- Descriptions: Halide, build time only ----
set(_def_srcs defs/common.cpp)
foreach(f ${TESSERA_FAMILIES})
  list(APPEND _def_srcs defs/${f}.cpp)
endforeach()
add_library(tessera_lang_defs STATIC ${_def_srcs})
target_link_libraries(tessera_lang_defs PUBLIC Halide::Halide tessera_lang_core)

add_executable(tessera-kernelc tools/kernelc.cpp)
target_link_libraries(tessera-kernelc PRIVATE tessera_lang_defs)
add_executable(tessera-strategyc tools/strategyc.cpp)
target_link_libraries(tessera-strategyc PRIVATE tessera_lang_defs)
target_include_directories(tessera-strategyc PRIVATE src)

# ---- Generated: strategy table and kernels ----
add_custom_command(
  OUTPUT ${GEN_DIR}/strategy_table.cpp ${GEN_DIR}/strategies.json
  COMMAND tessera-strategyc --cpp ${GEN_DIR}/strategy_table.cpp --json ${GEN_DIR}/strategies.json
  DEPENDS tessera-strategyc
  COMMENT "Deriving partition strategies with Halide bounds inference")

add_custom_command(
  OUTPUT ${GEN_DIR}/halide_runtime.o ${GEN_DIR}/kernel_targets.cpp
  COMMAND tessera-kernelc --runtime --target ${TESSERA_HALIDE_TARGET} --out-dir ${GEN_DIR}
  DEPENDS tessera-kernelc
  COMMENT "Compiling the Halide runtime")

foreach(f ${TESSERA_FAMILIES})
  foreach(i RANGE ${_last_target})
    add_custom_command(
      OUTPUT ${GEN_DIR}/kernels_${f}_t${i}.o ${GEN_DIR}/kernels_${f}_t${i}.h
      COMMAND tessera-kernelc --family ${f} --target ${TESSERA_HALIDE_TARGET} --part ${i} --out-dir ${GEN_DIR}
      DEPENDS tessera-kernelc
      COMMENT "Compiling Halide kernels: ${f}, target ${i}")
  endforeach()
  add_custom_command(
    OUTPUT ${GEN_DIR}/kernels_${f}.h ${GEN_DIR}/kernels_${f}_table.cpp
    COMMAND tessera-kernelc --family ${f} --target ${TESSERA_HALIDE_TARGET} --table --out-dir ${GEN_DIR}
    DEPENDS tessera-kernelc
    COMMENT "Writing the Halide kernels' table: ${f}")
endforeach()
