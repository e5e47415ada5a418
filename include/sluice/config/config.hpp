// SPDX-License-Identifier: Apache-2.0
#pragma once

// The configuration as plain, immutable-after-load structs. Only src/config includes yaml-cpp;
// every other module reads these structs. Defaults here are the documented defaults.

#include "sluice/core/json_fields.hpp"
#include "sluice/key/cidr.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace sluice::config {

using std::chrono::milliseconds;

enum class algorithm {
    leaky_bucket,
    token_bucket,
    fixed_window,
    sliding_window,
    /// Requests in flight at once, not per second: a slot is held from admission until the
    /// response is over.
    concurrency,
};

/// LEAKY_BUCKET: `shape` holds admitted requests until their slot; `police` forwards at once.
/// CONCURRENCY: `shape` waits for a free slot, in arrival order; `police` refuses at once.
enum class shaping_mode {
    shape,
    police,
};

enum class store_kind {
    memory,
    redis,
};

/// `server.headers-with-underscores`: what becomes of a request header field whose name has an
/// underscore. A CGI-style upstream (PHP, WSGI, Rack) reads `X_Api_Key` and `X-Api-Key` as one
/// variable, so a client could send under one spelling what sluice reads under the other.
enum class underscore_headers {
    allow,  // forwarded as any other field
    drop,   // taken out before the limiter reads the header (nginx's default)
    reject, // the request gets 400 and is not forwarded
};

/// What to do with a request when the Redis store cannot decide it.
enum class failure_mode {
    open,   // forward it, count it
    closed, // 503 with Retry-After
    local,  // decide it on the in-process memory store until Redis is back
};

/// One dimension of a limit's key.
struct key_part {
    enum class kind {
        ip,
        endpoint,
        header,
        global,
        json, // a field of the request's JSON body (issue 15)
    };
    kind what = kind::ip;
    std::string header; // the header name, for kind::header
    json_path json;     // for kind::json
};

/// Where a cost-weighted limit reads a figure: a fixed number, a header's value, or a field of
/// a JSON body.
struct cost_source {
    enum class kind {
        none,
        number, // `number`
        header, // the value of header `header` (request: a request header; response: a
                // response header or trailer)
        json,   // the number at `json` in the JSON body (request: its body; response: an
                // application/json body, or the last server-sent event that carries it)
    };
    kind what = kind::none;
    std::int64_t number = 0;
    std::string header;
    json_path json;
};

/// How much of a body sluice reads for its `json:` fields, unless `cost.max-body` says.
inline constexpr std::uint64_t default_json_body_bytes = 1024 * 1024;

/**
 * A limit's `cost` block: what a request reserves before it is forwarded, and what it is
 * settled at once the response is over (issue 15). Without one every request costs 1.
 */
struct cost_block {
    /// The reservation; a figure that is missing or not a finite non-negative number reserves
    /// `fallback` instead.
    cost_source request;
    std::int64_t fallback = 1;
    /// The real cost, from the response; `none`: the reservation stands.
    cost_source response;
    /// A response without a usable figure (absent, not a number, a 5xx, cut short) gives the
    /// reservation back (`on-missing: refund`) instead of keeping it (`keep`).
    bool refund_on_missing = false;
    /// The most of a body sluice holds to find a `json:` figure in it (a request body is read
    /// ahead of the decision up to this; a response body, or one server-sent event, is kept
    /// aside while it streams). A larger body has no figure.
    std::uint64_t max_body = default_json_body_bytes;
};

/// One limit: an algorithm and its parameters. Which fields apply depends on `algo`.
struct limit {
    algorithm algo = algorithm::leaky_bucket;
    /// LEAKY_BUCKET, TOKEN_BUCKET: the queue depth / bucket size.
    std::int64_t capacity = 50;
    /// LEAKY_BUCKET: drain rate, requests per second (fractions allowed).
    double flow_rate = 5;
    /// TOKEN_BUCKET: tokens per second (fractions allowed).
    double refill_rate = 0;
    /// FIXED_WINDOW, SLIDING_WINDOW: requests per window. CONCURRENCY: requests in flight.
    std::int64_t limit_count = 0;
    /// FIXED_WINDOW, SLIDING_WINDOW: the window length.
    milliseconds window{0};
    shaping_mode mode = shaping_mode::shape;
    /// Reject at once when the shaping delay (CONCURRENCY: the wait for a slot) would exceed
    /// this.
    std::optional<milliseconds> max_delay;
    /// CONCURRENCY, mode shape: how many requests of one key may wait for a slot on this
    /// instance; one that finds its key's line this long is refused (`429`). None: only
    /// `rate-limit.max-held` bounds them, so one client may take all of it.
    std::optional<std::int64_t> max_waiting;
    /// CONCURRENCY: a slot not renewed for this long is free (its instance died); held slots
    /// are renewed every lease / 3.
    milliseconds lease{30'000};
    bool dry_run = false;
    std::vector<key_part> key{{key_part::kind::ip, {}, {}}, {key_part::kind::endpoint, {}, {}}};
    /// TOKEN_BUCKET, LEAKY_BUCKET, FIXED_WINDOW: cost-weighted requests.
    std::optional<cost_block> cost;
    /// 1-based line in the config file, for messages; 0 when built in code.
    int line = 0;
};

struct rule {
    enum class match_kind {
        exact,
        prefix, // pattern ends in "/*" or "*"
        glob,   // any other pattern with '*'
    };
    std::string name;
    std::string path; // the pattern as written
    match_kind kind = match_kind::exact;
    std::vector<std::string> methods; // empty: any method
    std::vector<limit> limits;        // empty: unlimited
    int line = 0;
};

struct endpoint_address {
    std::string host = "127.0.0.1";
    std::uint16_t port = 0;

    bool operator==(const endpoint_address&) const = default;
};

/// "10.0.0.5:6379", "[::1]:6379": an address as an operator writes it, for messages.
inline std::string format_address(const endpoint_address& a) {
    const auto port = std::to_string(a.port);
    return a.host.find(':') == std::string::npos ? a.host + ":" + port : "[" + a.host + "]:" + port;
}

/// How sluice reaches Redis: one server (`host`), a Redis Cluster, or a primary found through
/// Redis Sentinel. See docs/redis-cluster.md.
enum class redis_topology {
    single,
    cluster,
    sentinel,
};

/// `rate-limit.redis.hash-tag` (Cluster only).
enum class hash_tag_mode {
    /// Keys as the page writes them: a client's limits may live on different slots.
    none,
    /// The client part of a key is a hash tag, `rate-limit:{203.0.113.7}:/v1/infer`.
    ip,
};

struct sentinel_settings {
    /// The name the Sentinels monitor (`sentinel monitor <name> ...`).
    std::string master;
    /// Asked in order; port 26379 when the address leaves it out.
    std::vector<endpoint_address> nodes;
    /// For the Sentinels themselves; `redis_settings::password` is the data nodes'.
    std::string password;

    bool operator==(const sentinel_settings&) const = default;
};

struct redis_settings {
    redis_topology topology = redis_topology::single;
    std::string host = "127.0.0.1"; // or a unix socket path (starts with '/')
    std::uint16_t port = 6379;
    /// topology::cluster: the seed nodes (port 6379 when left out); the rest is discovered.
    std::vector<endpoint_address> cluster;
    hash_tag_mode hash_tag = hash_tag_mode::none;
    /// topology::sentinel.
    sentinel_settings sentinel;
    std::string username;
    std::string password;
    /// Where `password` was read from (rate-limit.redis.password-file); empty when written in the
    /// config itself. The path only, for messages: never the secret.
    std::string password_file;
    int db = 0;
    milliseconds ttl{60'000};
    milliseconds timeout{50};
    milliseconds connect_timeout{1'000};
    failure_mode on_failure = failure_mode::open;
};

struct memory_settings {
    /// Keys the memory store holds at most (about 46 MB at the measured cost per key); beyond
    /// it, reset keys and then the least recently used are evicted.
    std::size_t max_keys = 375'000;
};

struct rate_limit_settings {
    store_kind store = store_kind::memory;
    limit fallback;
    std::vector<rule> rules;
    redis_settings redis;
    memory_settings memory;
    /// Global cap on requests held for shaping, across all workers; beyond it: 503.
    std::int64_t max_held = 10'000;
    /// Also emit X-RateLimit-Limit/-Remaining/-Reset.
    bool x_ratelimit_headers = false;
    /// IPv6 clients are grouped by this prefix length in keys.
    int ipv6_prefix = 64;
};

struct server_settings {
    endpoint_address listen{"127.0.0.1", 8080};
    std::vector<key::cidr> trusted_proxies;
    /// I/O worker threads; 0 means one per core.
    unsigned workers = 0;
    /// Client connections open at once, process-wide; 0: derived from the descriptor limit at
    /// start (what it leaves after the upstream's, Redis's and the admin listener's).
    std::uint64_t max_connections = 0;
    std::uint64_t max_header_bytes = 16 * 1024;
    std::uint64_t max_uri_bytes = 8 * 1024;
    underscore_headers headers_with_underscores = underscore_headers::drop;
    /// A chunk-size line with its extensions, in request bodies and upstream responses.
    std::uint64_t max_chunk_header_bytes = 4 * 1024;
    /// The trailer section of a chunked request body or upstream response.
    std::uint64_t max_trailer_bytes = 16 * 1024;
    /// 0 means no limit: bodies are streamed, never buffered whole.
    std::uint64_t max_body_bytes = 0;
    /// A request body with a Content-Length up to this is read whole before the upstream is
    /// contacted; of a larger one, this much, then the rest streams. A chunked body, and any
    /// body when 0, streams from its first block.
    std::uint64_t request_buffer_bytes = 16 * 1024;
    /// A keep-alive connection with no request for this long is closed.
    milliseconds idle_timeout{60'000};
    /// A request's header must arrive within this (slow-loris protection).
    milliseconds header_timeout{10'000};
    /// A request body must arrive whole within this, counted from its first read: else 408.
    milliseconds body_timeout{60'000};
    /// How long SIGTERM waits for in-flight and held requests.
    milliseconds drain_timeout{30'000};
};

struct upstream_settings {
    std::string url; // required: http://host:port
    std::string host;
    std::uint16_t port = 80;
    milliseconds connect_timeout{2'000};
    /// Until the upstream's response header arrives, and between body chunks: else 504.
    milliseconds timeout{30'000};
    /// Idle keep-alive connections kept per worker.
    std::size_t max_idle = 64;
    /// Connections open to the upstream per worker, in use or idle; beyond it requests wait up
    /// to `timeout` for one, then get 503.
    std::size_t max_connections = 256;
    /// WebSocket upgrades being forwarded and tunnels open per worker: one more gets 503, so
    /// that tunnels, which hold their upstream connections for as long as they last, leave
    /// `max_connections - max_tunnels` to other requests. 0: no cap of their own.
    std::size_t max_tunnels = 0;
    milliseconds idle_timeout{60'000};
    /// How long the addresses a DNS name of `host` resolved to are used before they are looked
    /// up again (in the background: connects go on with the old ones meanwhile); nginx's
    /// `resolver ... valid=30s`.
    milliseconds resolve_interval{30'000};
    /// A response head (status line, fields, blank line) longer than this gets 502: it bounds
    /// what an upstream makes sluice hold per connection before a byte of the body.
    std::uint64_t max_header_bytes = 64 * 1024;
};

struct logging_settings {
    std::string level = "info"; // trace debug info warn error critical off
    enum class format_kind {
        text,
        json,
    };
    format_kind format = format_kind::text;
    bool access_log = true;
};

struct admin_settings {
    endpoint_address listen{"127.0.0.1", 9901};
    bool enabled = true;
};

struct config {
    std::string source; // file path, for messages
    server_settings server;
    upstream_settings upstream;
    rate_limit_settings rate_limit;
    logging_settings logging;
    admin_settings admin;
    /// Problems that do not stop sluice (e.g. a TTL shorter than a full drain), one per line.
    std::vector<std::string> warnings;
    /// The 1-based line of each key the file set outside lists, by its dotted path
    /// ("rate-limit.redis.host"): what a message written after the load (a reload's
    /// restart-only keys) points at. Empty when built in code.
    std::map<std::string, int, std::less<>> key_lines;
};

} // namespace sluice::config
