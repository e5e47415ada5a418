list(APPEND SLUICE_CORE_SOURCES
  src/limiter/algorithm.cpp
  src/limiter/concurrency.cpp
  src/limiter/cost.cpp
  src/limiter/fixed_window.cpp
  src/limiter/leaky_bucket.cpp
  src/limiter/sliding_window.cpp
  src/limiter/token_bucket.cpp)
