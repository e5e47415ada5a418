# io: the Asio vocabulary (net.hpp) and the stream with a deadline (timed_stream.hpp), header-only
# in include/sluice/io/. Used by the I/O modules (store, redis, upstream, metrics, http, app);
# sluice_core (core, config, key, limiter) never includes it, so it links without Asio.
