// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"
#include "sluice/core/errc.hpp"
#include "sluice/io/address_cache.hpp"
#include "sluice/io/net.hpp"
#include "sluice/redis/reply.hpp"

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/async_result.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::redis {

using std::chrono::milliseconds;

/**
 * A set-up command whose reply must pass a test, sent on every connection after AUTH and before
 * SELECT: ROLE, whose first element must be `master`, behind Sentinel. `verdict` gets the reply
 * and the server's address; it returns empty when the reply passes, otherwise the line to log
 * (throttled as set-up errors are) when the connection is dropped. An error reply fails the
 * set-up as any step's does.
 */
struct connect_check {
    std::vector<std::string> command;
    std::function<std::string(const reply&, const std::string& where)> verdict;
};

/// How a `client` connects; `from_settings` maps the configuration onto it.
struct client_options {
    std::string host = "127.0.0.1"; // or a unix socket path (starts with '/')
    std::uint16_t port = 6379;
    std::string username; // AUTH username password when set (Redis 6 ACL)
    std::string password; // AUTH password when set
    int db = 0;           // SELECT db when not 0
    /// A command without a reply after this completes with `errc::redis_timeout`.
    milliseconds command_timeout{50};
    /// A connection not established and set up (AUTH, SELECT, connect commands) after this is
    /// dropped and retried. For a host name with no address found yet, the wait for its lookup
    /// counts in it too.
    milliseconds connect_timeout{1'000};
    /// How long the addresses of a host name are used before a lookup refreshes them in the
    /// background (connects go on with the old ones meanwhile): upstream.resolve-interval's
    /// default, nginx's `resolver ... valid=30s`; every second instead while the server cannot
    /// be reached, so that one that came back at another address is found then. No key sets
    /// it: the outage refresh is what a moved Redis needs.
    milliseconds resolve_interval{30'000};
    /// Resolves a host name (not an address, not a unix socket path), blocking, on a thread of
    /// its own (see `address_cache`); tests inject one.
    lookup_function lookup = system_lookup;
    /// Counts the host name's failed lookups when set (sluice_redis_lookup_failures_total); it
    /// must outlive the client. Copied, as `lookup` is, into every client Sentinel and Cluster
    /// make from these options.
    std::atomic<std::uint64_t>* lookup_failures = nullptr;
    /// A connection that leaves a command unanswered this long past its deadline is taken for
    /// dead (a hung server, a silent network): it is dropped and re-established.
    milliseconds stall_timeout{1'000};
    /// Reconnect backoff (see `reconnect_backoff`): doubles from `reconnect_min` up to
    /// `reconnect_max`, with jitter, after any failure to get a connection set up. The
    /// ceiling bounds how long limits stay unenforced after Redis comes back (at most
    /// `reconnect_max` plus the connect): half a second, so well within one; a refused connect
    /// costs next to nothing, a few per second per worker are no load.
    milliseconds reconnect_min{100};
    milliseconds reconnect_max{500};
    /// Commands awaiting a reply (timed-out ones included) beyond which new commands fail at
    /// once with `redis_unavailable`: a stalled server must not grow memory without bound.
    std::size_t max_pending = 10'000;
    /// Checked on every connection before it counts as set up; none by default.
    std::optional<connect_check> check;
    /**
     * Posted to the client's executor whenever the server may no longer be the right one: a
     * connection could not be made or set up, was lost or dropped as stalled, `check` refused
     * it, or a command got a `READONLY` reply. Behind Sentinel it asks the Sentinels again.
     * Unset by default.
     */
    std::function<void()> on_trouble;
    /// Posted to the client's executor with the server's address (before `on_trouble`) each
    /// time `check` refused it. Behind Sentinel it tells the watcher that the Sentinel which
    /// named this server is behind, so that another is asked first. Unset by default.
    std::function<void(const config::endpoint_address&)> on_refused;

    static client_options from_settings(const config::redis_settings& settings);
};

/// What an error reply to a connect command does (`client::add_connect_command`).
enum class if_refused : std::uint8_t {
    fail_setup, ///< the connection is given up, and made again later (SCRIPT LOAD)
    carry_on,   ///< the set-up goes on (FUNCTION LOAD, which Redis before 7 does not know)
};

/// A command of every connection's set-up (`client::add_connect_command`).
struct connect_command {
    std::vector<std::string> args;
    if_refused refused = if_refused::fail_setup;
};

/**
 * An asynchronous Redis client on hiredis 0.14.1, bound to one Asio executor.
 *
 * One client per worker thread: it is single-threaded and must be used only from its executor's
 * thread (one `io_context` run by one thread). Commands pipeline on one connection. After the
 * connection is lost the client reconnects by itself, with exponential backoff and jitter;
 * while it is not connected, commands fail at once with `errc::redis_unavailable` (they are not
 * queued), so callers can apply their failure mode without waiting. Each new connection is first
 * set up: AUTH (when a password is set) and, once it succeeded, SELECT and the registered
 * connect commands. Commands sent while a connection is being made or set up are held, and sent
 * once it is set up (or fail with `errc::redis_unavailable` if it is not). A set-up step Redis
 * refuses is logged (`redis: authentication failed for user X ...`; each step's error at most
 * once per 10 s per server and error kind) and counts as a failed connection, with its backoff.
 * Nothing here blocks: a host name is connected to at the addresses its last lookup found
 * (`address_cache`, one per client, refreshed in the background every `resolve_interval`);
 * before its first lookup has answered, a connect waits for it within `connect_timeout`, then
 * fails as a refused one does (and the lookup goes on, for the next attempt). A DNS that does
 * not answer thus costs each attempt its connect timeout, and holds neither the worker nor the
 * exit. Of several addresses, the first is connected to.
 */
class client {
public:
    using completion_signature = void(error_code, reply);
    using handler_type = net::any_completion_handler<completion_signature>;

    /// Does not connect yet; call `start()`.
    client(executor ex, client_options options);

    /// Drops the connection; commands still pending complete with `errc::redis_unavailable`.
    /// Must not be called from inside a completion handler of this client's own hiredis
    /// callbacks (none run inline: every completion is posted).
    ~client();

    client(const client&) = delete;
    client& operator=(const client&) = delete;

    /// Starts connecting (and reconnecting until `stop()` or destruction). Idempotent; does
    /// nothing after `stop()`, which is final. With an empty host it connects nowhere until
    /// `retarget` gives it an address; meanwhile commands fail with `errc::redis_unavailable`.
    void start();

    /**
     * Points the client at another server (a Sentinel failover). At the same address it does
     * nothing. Otherwise, once started, it drops the connection at once: commands pending on it
     * complete with `errc::redis_unavailable` (nothing waits for a server that is no longer
     * the one), and it connects to the new address without waiting for a backoff. Before
     * `start()` it only sets the address; after `stop()` nothing. Call on the client's executor.
     */
    void retarget(std::string host, std::uint16_t port);

    /**
     * Stops reconnecting and disconnects gracefully: replies already in flight still complete,
     * new commands fail with `errc::redis_unavailable`. A server that leaves a command
     * unanswered `stall_timeout` past its deadline (hung) has the connection dropped then, as
     * a connected client's would be: the rest complete with `errc::redis_unavailable`, and
     * nothing of the client keeps its executor busy after that.
     */
    void stop();

    /**
     * Sends one command, e.g. `{"SET", "k", "v"}`; arguments are binary-safe.
     *
     * Completes with `(error_code, reply)`:
     * - success: `ec` clear and the reply (which may be nil);
     * - an error reply: `errc::bad_reply`, with the error text in `reply.str`;
     * - not connected, connection lost, or too many commands pending: `errc::redis_unavailable`;
     * - no reply within `command_timeout`: `errc::redis_timeout` (a late reply is dropped).
     *
     * The completion never runs inside this call: it is posted to the client's executor and
     * then dispatched to the handler's associated executor.
     */
    template <typename CompletionToken = net::default_completion_token_t<executor>>
    auto async_command(std::vector<std::string> args, CompletionToken&& token = {}) {
        return net::async_initiate<CompletionToken, completion_signature>(
            [this](auto handler, std::vector<std::string> command) {
                submit(command, handler_type(std::move(handler)));
            },
            token,
            std::move(args));
    }

    /**
     * The same for a command already in RESP (see `command_writer`), copied into the
     * connection's output buffer when the operation starts (at once with a callback; when the
     * awaiting coroutine suspends with `use_awaitable`), so it need only live until then.
     */
    template <typename CompletionToken = net::default_completion_token_t<executor>>
    auto async_formatted(std::string_view command, CompletionToken&& token = {}) {
        return net::async_initiate<CompletionToken, completion_signature>(
            [this](auto handler, std::string_view resp) {
                submit_formatted(resp, handler_type(std::move(handler)));
            },
            token,
            command);
    }

    /**
     * `async_command` with a deadline of its own instead of `command_timeout` from now, earlier
     * or later: a cluster map read, allowed `connect_timeout` although the node's commands get
     * the per-decision timeout, or a redirected call, which must end when the call ends. A
     * command held while the connection is set up counts the time held in it too, and is
     * never sent once its deadline has passed.
     */
    template <typename CompletionToken = net::default_completion_token_t<executor>>
    auto async_command_until(std::chrono::steady_clock::time_point deadline,
                             std::vector<std::string> args,
                             CompletionToken&& token = {}) {
        return net::async_initiate<CompletionToken, completion_signature>(
            [this, deadline](auto handler, std::vector<std::string> command) {
                submit(command, handler_type(std::move(handler)), deadline);
            },
            token,
            std::move(args));
    }

    /// `async_formatted` with a deadline of its own (see `async_command_until`).
    template <typename CompletionToken = net::default_completion_token_t<executor>>
    auto async_formatted_until(std::chrono::steady_clock::time_point deadline,
                               std::string_view command,
                               CompletionToken&& token = {}) {
        return net::async_initiate<CompletionToken, completion_signature>(
            [this, deadline](auto handler, std::string_view resp) {
                submit_formatted(resp, handler_type(std::move(handler)), deadline);
            },
            token,
            command);
    }

    /**
     * Registers a command to send as part of every connection's set-up, after AUTH and SELECT
     * (e.g. `SCRIPT LOAD`): an error reply fails the set-up, unless `refused` is `carry_on`.
     * Sent at once too when a connection is up or being set up (then an error reply on an
     * established connection is only logged, or with `carry_on` ignored). An identical command
     * registered twice is kept once.
     */
    void add_connect_command(std::vector<std::string> args,
                             if_refused refused = if_refused::fail_setup);

    /**
     * Makes this client a subscriber: every connection, once set up, sends `SUBSCRIBE channel`,
     * and the payload of each message published on it is passed to `on_message`, posted to the
     * client's executor. Call before `start()`. A subscribing client carries nothing else (Redis
     * accepts only subscription commands on such a connection). Redis keeps no message for a
     * subscriber that is not connected: what is published during a reconnect is lost, so a
     * user must not depend on every message arriving.
     */
    void subscribe(std::string channel, std::function<void(std::string)> on_message);

    /// Subscriptions Redis confirmed so far (one per connection). Safe from any thread.
    std::uint64_t subscription_count() const noexcept;

    /// True when a connection is established and set up. Safe from any thread.
    bool connected() const noexcept;

    /// Connections established and set up so far (1 after the first, 2 after a reconnect, ...).
    std::uint64_t connection_count() const noexcept;

    const executor& get_executor() const noexcept { return ex_; }

private:
    void submit(std::span<const std::string> args,
                handler_type handler,
                std::optional<std::chrono::steady_clock::time_point> deadline = {});
    void submit_formatted(std::string_view command,
                          handler_type handler,
                          std::optional<std::chrono::steady_clock::time_point> deadline = {});

    struct state;
    executor ex_;
    std::shared_ptr<state> state_;
};

} // namespace sluice::redis
