list(APPEND SLUICE_CORE_SOURCES
  src/key/cidr.cpp
  src/key/path.cpp
  src/key/client_address.cpp
  src/key/rate_limit_key.cpp)
