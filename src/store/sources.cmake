list(APPEND SLUICE_NET_SOURCES
  src/store/memory_store.cpp
  src/store/redis_store.cpp
  src/store/slot_waiters.cpp)
