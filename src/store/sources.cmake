list(APPEND SLUICE_NET_SOURCES
  src/store/key_table.cpp
  src/store/limits_call.cpp
  src/store/memory_store.cpp
  src/store/packed_state.cpp
  src/store/redis_store.cpp
  src/store/redis_store_charges.cpp
  src/store/redis_store_scripts.cpp
  src/store/slot_waiters.cpp)
