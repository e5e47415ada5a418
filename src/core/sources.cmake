list(APPEND SLUICE_CORE_SOURCES src/core/errc.cpp src/core/clock.cpp src/core/json_fields.cpp
  src/core/log_excerpt.cpp src/core/text.cpp src/core/escaped_exception.cpp src/core/keyed_hash.cpp)
