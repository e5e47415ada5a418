list(APPEND SLUICE_NET_SOURCES src/upstream/pool.cpp)
