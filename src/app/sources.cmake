list(APPEND SLUICE_NET_SOURCES
  src/app/app.cpp
  src/app/command_line.cpp
  src/app/config_report.cpp
  src/app/connection_cap.cpp
  src/app/log_queue.cpp
  src/app/logging.cpp)
