list(APPEND SLUICE_NET_SOURCES
  src/http/access_log.cpp
  src/http/request_handler.cpp
  src/http/request_limiter.cpp
  src/http/forward_headers.cpp
  src/http/forwarder.cpp
  src/http/listener.cpp
  src/http/local_reply.cpp
  src/http/message_parse.cpp
  src/http/message_reader.cpp
  src/http/message_writer.cpp
  src/http/rate_limit_headers.cpp
  src/http/request_checks.cpp
  src/http/response_figures.cpp
  src/http/response_relay.cpp
  src/http/session.cpp
  src/http/tunnel.cpp
  src/http/verdict.cpp)
