list(APPEND SLUICE_NET_SOURCES src/upstream/address_cache.cpp src/upstream/pool.cpp)
