# io: the Asio vocabulary (net.hpp), the stream with a deadline (timed_stream.hpp) and the other
# headers of include/sluice/io/, which need no source file; and the addresses of a host name kept
# per worker (address_cache.cpp), for the upstream pool and the Redis client alike, and the
# connect to them in turn (connect_in_turn.cpp). Used by the
# I/O modules (store, redis, upstream, metrics, http, app); sluice_core (core, config, key,
# limiter) never includes it, so it links without Asio.
list(APPEND SLUICE_NET_SOURCES src/io/address_cache.cpp src/io/connect_in_turn.cpp)
