list(APPEND SLUICE_CORE_SOURCES src/limiter/leaky_bucket.cpp)
