# The redis module, and the Redis store (listed here so that src/store/sources.cmake stays the
# memory store's).
#
# src/redis/limits.lua and slots.lua are embedded at build time: embed_lua.cmake turns each into
# a .cpp holding the script and its SHA1, regenerated whenever the script changes.
set(_sluice_limits_lua ${CMAKE_CURRENT_LIST_DIR}/limits.lua)
set(_sluice_limits_cpp ${CMAKE_CURRENT_BINARY_DIR}/generated/limits_lua.cpp)
add_custom_command(
  OUTPUT ${_sluice_limits_cpp}
  COMMAND ${CMAKE_COMMAND} -DINPUT=${_sluice_limits_lua} -DOUTPUT=${_sluice_limits_cpp}
          -DNAME=limits_script -P ${CMAKE_CURRENT_LIST_DIR}/embed_lua.cmake
  DEPENDS ${_sluice_limits_lua} ${CMAKE_CURRENT_LIST_DIR}/embed_lua.cmake
  COMMENT "Embedding src/redis/limits.lua"
  VERBATIM)

set(_sluice_slots_lua ${CMAKE_CURRENT_LIST_DIR}/slots.lua)
set(_sluice_slots_cpp ${CMAKE_CURRENT_BINARY_DIR}/generated/slots_lua.cpp)
add_custom_command(
  OUTPUT ${_sluice_slots_cpp}
  COMMAND ${CMAKE_COMMAND} -DINPUT=${_sluice_slots_lua} -DOUTPUT=${_sluice_slots_cpp}
          -DNAME=slots_script -P ${CMAKE_CURRENT_LIST_DIR}/embed_lua.cmake
  DEPENDS ${_sluice_slots_lua} ${CMAKE_CURRENT_LIST_DIR}/embed_lua.cmake
  COMMENT "Embedding src/redis/slots.lua"
  VERBATIM)

list(APPEND SLUICE_NET_SOURCES
  src/redis/asio_adapter.cpp
  src/redis/client.cpp
  src/redis/reply.cpp
  ${_sluice_limits_cpp}
  ${_sluice_slots_cpp})
