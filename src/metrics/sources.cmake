list(APPEND SLUICE_NET_SOURCES src/metrics/metrics.cpp src/metrics/admin_server.cpp)
