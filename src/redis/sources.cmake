# The redis module, and the Redis store (listed here so that src/store/sources.cmake stays the
# memory store's).
#
# src/redis/limits.lua and slots.lua are embedded at build time: embed_lua.cmake turns each into
# a .cpp holding the script and its SHA1, regenerated whenever the script changes.
# sluice_embed_lua(NAME SCRIPT VAR [ENTRY]): src/redis/SCRIPT embedded as the `redis::script`
# NAME; VAR names the generated .cpp; ENTRY, the script's function to register when it is loaded
# as a Redis Function library (see embed_lua.cmake).
function(sluice_embed_lua name script var)
  set(entry "${ARGN}")
  set(input ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/${script})
  get_filename_component(stem ${script} NAME_WE)
  set(output ${CMAKE_CURRENT_BINARY_DIR}/generated/${stem}_lua.cpp)
  add_custom_command(
    OUTPUT ${output}
    COMMAND ${CMAKE_COMMAND} -DINPUT=${input} -DOUTPUT=${output} -DNAME=${name} -DENTRY=${entry}
            -P ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/embed_lua.cmake
    DEPENDS ${input} ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/embed_lua.cmake
    COMMENT "Embedding src/redis/${script}"
    VERBATIM)
  set(${var} ${output} PARENT_SCOPE)
endfunction()

sluice_embed_lua(limits_script limits.lua _sluice_limits_cpp decide_batch)
sluice_embed_lua(slots_script slots.lua _sluice_slots_cpp)

list(APPEND SLUICE_NET_SOURCES
  src/redis/asio_adapter.cpp
  src/redis/client.cpp
  src/redis/cluster_client.cpp
  src/redis/cluster_slots.cpp
  src/redis/reply.cpp
  src/redis/scripts.cpp
  src/redis/sentinel.cpp
  ${_sluice_limits_cpp}
  ${_sluice_slots_cpp})
