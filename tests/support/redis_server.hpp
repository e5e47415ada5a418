// SPDX-License-Identifier: Apache-2.0
#pragma once

// A private redis-server for tests: its own free port on 127.0.0.1, its own temporary directory,
// no persistence. It can be killed, restarted on the same port, and paused (SIGSTOP) to make
// commands time out.

#include "sluice/config/config.hpp"
#include "support/temp_dir.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace sluice::test {

/// The path of executable `name` in a directory of PATH; empty when there is none.
std::string find_on_path(const std::string& name);

/// The number after `field` (e.g. "errorstat_NOPERM:count=", "total_connections_received:") in
/// the text of an INFO section; 0 when the field is absent (Redis omits counts never raised).
std::int64_t info_count(std::string_view info, std::string_view field);

/// The script calls (FCALL, EVALSHA and EVAL) a server has run, from its `INFO commandstats`
/// text.
std::int64_t script_calls_in(std::string_view commandstats);

class redis_server {
public:
    struct options {
        /// Started with `--requirepass` when not empty.
        std::string requirepass;
        /// Also listen on a unix socket in the temporary directory.
        bool unix_socket = false;
        /// A node of a Redis Cluster (`--cluster-enabled yes`, its bus on a free port of its
        /// own), with no slots assigned: it answers CLUSTER KEYSLOT and the like.
        bool cluster_enabled = false;
        /// More arguments, e.g. {"--cluster-node-timeout", "1000"}.
        std::vector<std::string> extra_args{};
        /// A Sentinel (`redis-server <conf> --sentinel`) when not empty: these lines (e.g.
        /// `sentinel monitor ...`) go into its config file in the temporary directory, which
        /// Sentinel rewrites as it learns; kept across restarts.
        std::vector<std::string> sentinel_config{};
    };

    /// True when `redis-server` can be found on PATH; tests skip themselves otherwise.
    static bool available();

    /**
     * Starts the server and waits until it answers PING (or refuses with NOAUTH). Throws
     * std::runtime_error when it cannot within a few seconds.
     */
    redis_server()
        : redis_server(options{}) {}

    explicit redis_server(options opts);

    /// Kills the server (SIGKILL: nothing to save) and removes its directory.
    ~redis_server();

    redis_server(const redis_server&) = delete;
    redis_server& operator=(const redis_server&) = delete;

    const std::string& host() const { return host_; }

    std::uint16_t port() const { return port_; }

    /// The cluster bus port; 0 unless `options::cluster_enabled`. Kept across restarts, as the
    /// node's identity (its nodes.conf) is.
    std::uint16_t cluster_port() const { return cluster_port_; }

    /// The server's log file, for failure messages.
    std::string log_file() const { return dir_.file("redis.log"); }

    /// The unix socket's path; empty unless `options::unix_socket`.
    const std::string& unix_socket() const { return unix_socket_; }

    bool running() const { return pid_ > 0; }

    /// Settings that reach this server over TCP (password included), with default timeouts.
    config::redis_settings settings() const;

    /// Kills the server at once (a crash, as far as clients can tell). Idempotent.
    void stop();

    /// Starts it again on the same port and waits until it answers. Throws like the constructor.
    void restart();

    /// SIGSTOP: the server keeps its connections but answers nothing until `resume()`.
    void pause();

    /// SIGCONT.
    void resume();

private:
    void start(std::chrono::milliseconds limit);
    bool wait_ready(std::chrono::milliseconds limit);

    options opts_;
    temp_dir dir_;
    std::string host_ = "127.0.0.1";
    std::uint16_t port_ = 0;
    std::uint16_t cluster_port_ = 0;
    std::string unix_socket_;
    pid_t pid_ = -1;
    bool paused_ = false;
};

} // namespace sluice::test
