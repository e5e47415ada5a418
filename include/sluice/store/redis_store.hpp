// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"
#include "sluice/core/keyed_hash.hpp"
#include "sluice/core/log_throttle.hpp"
#include "sluice/io/net.hpp"
#include "sluice/metrics/metrics.hpp"
#include "sluice/redis/client.hpp"
#include "sluice/redis/cluster_client.hpp"
#include "sluice/redis/scripts.hpp"
#include "sluice/store/memory_store.hpp"
#include "sluice/store/store.hpp"

#include <boost/asio/any_completion_handler.hpp>
#include <boost/container/small_vector.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sluice::store {

class slot_waiters;

namespace limits_call {
class definition_texts;
}

/**
 * What a tentative request's charge on one limit leaves for its give-back (see the header of
 * src/redis/limits.lua): a fixed window's start in t1; a sliding window's entry, its running
 * total in t1 and its time in t2; zeros otherwise.
 */
struct give_back_token {
    std::int64_t t1 = 0;
    std::int64_t t2 = 0;

    bool operator==(const give_back_token&) const = default;
};

/**
 * One charge of a tentative request to give back with `redis_store::give_back`: the part of a
 * request whose keys span Redis Cluster slots that admitted it, when another part refused
 * (docs/redis-cluster.md, "All-or-none across slots").
 */
struct give_back_entry {
    /// The key charged, as in its `check`.
    std::string key;
    /// The limit charged; need only live during the `give_back` call.
    const config::limit* limit = nullptr;
    /// What was charged: the check's cost, clamped as charged (limiter::clamp_cost).
    std::int64_t amount = 1;
    give_back_token token;
};

/**
 * Limiter state in Redis, shared by every sluice instance: one store (and one `redis::client`,
 * or on Redis Cluster one `redis::cluster_client`) per worker thread.
 *
 * Requests are decided by one call of src/redis/limits.lua, with every check of a request, so
 * all its limits are decided and charged atomically, with Redis `TIME` as the clock. The requests
 * that call `acquire` in one turn of the worker's event loop share one call (at most
 * `max_batch` of them): the script decides them one after the other, exactly as separate calls
 * at that instant would. While a batch's call is in flight, the next batch of its slot stays
 * open and takes the requests of the turns that follow, until the reply comes back (or it is
 * full): as Nagle's algorithm does with segments, one call in flight at a time, and a call
 * as soon as there is none. A quiet worker sends each request at once, in a call of its own; a
 * busy one pays the script's fixed costs, and Redis its per-command network work, once per
 * batch, and its batches grow with the load. A request held so waits for at most one reply
 * more; when that call times out, the requests held behind it fail with it at once (Redis
 * would have answered them after it), so that none waits longer than `timeout`.
 *
 * The call is FCALL of the script's Redis Function library (Redis 7), which builds the script's
 * prelude (its functions and tables) once per load where EVALSHA builds it on every call: one
 * call of one request cost Redis 13.2 us against 19.1 (bench/run, docs/benchmarks.md). Every
 * (re)connection loads the library with FUNCTION LOAD and the script with SCRIPT LOAD, ahead of
 * any request. Should Redis answer an FCALL "Function not found" anyway (FUNCTION FLUSH), the
 * store sends FUNCTION LOAD again and that batch goes by EVALSHA; where Redis has no Functions
 * (before 7) or refuses them (an ACL, a failed load), the store calls EVALSHA for a minute, then
 * tries FCALL again (`default_functions_retry_after`).
 * Should Redis answer an EVALSHA NOSCRIPT (SCRIPT FLUSH, failover), the batch is sent once more
 * with EVAL, which loads the script again.
 *
 * When Redis cannot decide (unavailable, timed out, an error reply), the outcome depends on
 * `redis_settings::on_failure`: `open` and `closed` return the error in `outcome.ec` (the caller
 * applies the mode); `local` decides on `local_fallback` instead and clears `ec`.
 *
 * `acquire` must be awaited on the client's executor (the worker's thread). It never completes
 * inline (an empty `checks` completes at once, posted); it never throws.
 */
class redis_store final : public store {
public:
    /**
     * Uses `client`, which must outlive the store and be started by its owner. Registers the
     * scripts' SCRIPT LOAD as connect commands on it. `local_fallback` may be null (then
     * `on_failure: local` acts as `open`); when set, it must outlive the store.
     */
    redis_store(redis::client& client,
                const config::redis_settings& settings,
                memory_store* local_fallback = nullptr);

    /**
     * On Redis Cluster: uses `cluster`, which must outlive the store and be started by its owner.
     * Each script call goes to the primary of its keys' slot: a turn's requests are batched per
     * slot, and a request whose keys span k slots is sent as k tentative parts, given back where
     * they admitted when another refused (docs/redis-cluster.md, "All-or-none across slots").
     */
    redis_store(redis::cluster_client& cluster,
                const config::redis_settings& settings,
                memory_store* local_fallback = nullptr);

    /// Owns a client (a cluster client with `topology: cluster`) on `ex` built from `settings`,
    /// and starts it; `lookup_failures` counts its host names' failed lookups when given.
    redis_store(executor ex,
                const config::redis_settings& settings,
                memory_store* local_fallback = nullptr,
                std::atomic<std::uint64_t>* lookup_failures = nullptr);

    ~redis_store() override;

    awaitable<outcome> acquire(checks request_checks) override;

    /// The request waits in its batch with pointers to `request_checks` and `out`; its reply is
    /// decoded straight into `out`.
    awaitable<void> acquire_into(const checks& request_checks, outcome& out) override;

    /// Gives back slots: Redis ones by script (which publishes the freed key to every
    /// instance's waiters), the slots of one event-loop turn in one call; the local fallback's
    /// to it.
    void release(std::span<const slot> taken) noexcept override;

    /**
     * Settles reservations by src/redis/limits.lua (its settlement groups), on Redis TIME: the
     * settlements of one event-loop turn in one call (at most `max_batch` per call), as
     * releases are. Redis unavailable or an error reply: the adjustments are dropped (a refund
     * lost, a charge not made), with a rate-limited warning. A settlement of a request the
     * local fallback decided (`on_failure: local`; `settlement::local`) goes to the fallback,
     * where it was charged, at once.
     */
    void settle(std::span<const settlement> adjustments) noexcept override;

    /**
     * Gives back charges of tentative requests, each undone as src/redis/limits.lua's give-back
     * groups do (a bucket refilled to now and the amount added back; a fixed window's count
     * lowered if its window is still current; a sliding window's entry removed if it still
     * weighs), on Redis TIME. Sent as settlements are, in the same calls: after this turn of the
     * event loop, at most `max_batch` per call. Redis unavailable or an error reply: the charges
     * stay until they lapse (refill, window end), with a rate-limited warning. Entries of
     * CONCURRENCY limits are ignored: a tentative request's slots are in its outcome's `slots`,
     * given back with `release` as any slot is (src/redis/slots.lua announces them).
     */
    void give_back(std::span<const give_back_entry> charges) noexcept;

    /// A tentative request's outcome, and what giving back its charges takes.
    struct tentative_outcome {
        outcome decided;
        /// One per limit charged: the last check on its key of an admitted request (the script
        /// writes only that one), CONCURRENCY aside. Empty when the request was refused.
        std::vector<give_back_entry> give_backs;
    };

    /**
     * For tests, until the Cluster store sends the parts of its split batches so: `acquire`, with
     * the request sent tentative (its group's count word 2^30 + n), in the batch of this turn as
     * any other, and its give-back entries parsed from the tokens in the reply.
     */
    awaitable<tentative_outcome> acquire_tentative_for_test(checks request_checks);

    /**
     * Ends the store at the end of a drain: sends the slots given back this turn (they would
     * otherwise lapse with their lease, keeping other instances' requests waiting), stops
     * renewing (a pending renewal would keep the worker's event loop, and the process, alive
     * for up to a third of a lease), and closes the connection once its replies are in.
     */
    void stop();

    /**
     * The drain's deadline: the requests still in flight are about to be cut, nothing of theirs
     * run again. Gives back now every CONCURRENCY slot they hold, and sends the settlements not
     * yet sent: cut, their slots counted against their keys on every instance until their leases
     * lapsed. `answered` runs once every call sent for them from then on is done with (answered,
     * failed, or sent again by another name and that one done with), and the batches in flight
     * then are answered and what they took given back too; at once when there is nothing to
     * send. On the store's executor.
     */
    void give_back_before_exit(std::function<void()> answered);

    /// Requests decided by one script call at most: bounds how long one call keeps Redis busy.
    static constexpr std::size_t max_batch = 128;

    /// Give-backs kept while Redis cannot be reached (see `unsent_releases_`), at most.
    static constexpr std::size_t max_unsent_releases = 4'096;

    /// For tests: pass this time (unix ms) to the script instead of letting it read Redis TIME;
    /// `std::nullopt` restores TIME.
    void set_time_override_for_test(std::optional<double> now_ms) { now_override_ = now_ms; }

    /// How long a store that gave Redis Functions up decides by EVALSHA before it tries FCALL
    /// again: one refused call a minute costs Redis nothing worth counting, and a passing refusal
    /// costs at most a minute of the 6 us per call that EVALSHA's prelude takes.
    static constexpr std::chrono::seconds default_functions_retry_after{60};

    /// For tests: how long after giving Functions up the store tries them again.
    void set_functions_retry_after_for_test(std::chrono::steady_clock::duration d) {
        functions_retry_after_ = d;
    }

    /// The one Redis's client; only without Cluster.
    redis::client& client() noexcept { return *client_; }

    /// The cluster client; null without Cluster.
    redis::cluster_client* cluster() noexcept { return cluster_; }

    /// Whether script calls can be decided now: the client connected, or on Cluster a map
    /// covering every slot with every owning primary connected. Safe from any thread.
    bool connected() const noexcept;

    /// Multi-slot requests refused after another slot charged them, given back (what the
    /// all-or-none protocol costs). Safe from any thread.
    std::uint64_t give_backs_sent() const noexcept {
        return give_backs_sent_.load(std::memory_order_relaxed);
    }

    /**
     * Applies what a reload may change: `ttl` (for the keys written from now on) and
     * `on_failure`. The other settings made the client's connection and need a restart. Call on
     * the client's executor.
     */
    void apply_reloadable(const config::redis_settings& settings) noexcept;

    /// The pub/sub channel on which a freed CONCURRENCY slot's key is announced (see
    /// src/redis/slots.lua); every instance's waiters listen on it.
    static std::string slot_channel(const config::redis_settings& settings);

    /**
     * For an announcement heard on `slot_channel` ("<count>:<key>", see src/redis/slots.lua):
     * wakes up to <count> of this process's waiters for the key (at most `max_batch`, what one
     * call frees). A message of another shape is ignored. Returns the waiters reached.
     */
    static std::size_t wake_waiters(slot_waiters& waiters, std::string_view announcement);

    /// Counts Redis latency and errors in `registry` (which must outlive the store); optional.
    void set_metrics(metrics::registry* registry);

private:
    /// Everything but the connection, which each public constructor sets.
    struct unconnected {};

    redis_store(unconnected,
                executor ex,
                const config::redis_settings& settings,
                memory_store* local_fallback);

    struct batch_waiter;
    struct batch;

    /// A CONCURRENCY slot to give back, and when its lease lapses in Redis (on this host's
    /// steady clock, from when it was taken or last renewed: a bound, never late).
    struct slot_release {
        std::string key;
        std::string lease_id;
        std::chrono::steady_clock::time_point lapses;
    };

    using batch_ptr = std::shared_ptr<batch>;

    /// Adds a request to the open batch: `handler` runs once its outcome is in `out`.
    /// `request_checks` and `out` are the waiting coroutine's, alive as long as `handler` is
    /// (it owns the coroutine's frame). Tentative when `give_backs` is set, which receives the
    /// request's give-back entries before `handler` runs.
    void enqueue(const checks& request_checks,
                 outcome& out,
                 net::any_completion_handler<void()> handler,
                 std::shared_ptr<std::vector<give_back_entry>> give_backs = nullptr);
    /// Adds a request to the open batch of `slot` (0 without Cluster), as `enqueue`. A `part`
    /// (of a request split across slots) that fails completes with the error, never the failure
    /// mode: the whole request gets that.
    void add_to_batch(std::uint16_t slot,
                      const checks& request_checks,
                      outcome& out,
                      net::any_completion_handler<void()> handler,
                      std::shared_ptr<std::vector<give_back_entry>> give_backs,
                      bool part);
    /// Cluster: sends a request whose keys span slots as tentative parts, one per slot.
    void
    split(const checks& request_checks, outcome& out, net::any_completion_handler<void()> handler);
    struct joint;
    void finish_joint(joint& j);
    void flush();
    void flush_batch(batch_ptr b);
    /// Script calls of `slot` sent and not yet answered.
    std::size_t calls_in_flight(std::uint16_t slot) const noexcept;
    /// A call of `slot` is answered (`ec` its outcome): when it was the last in flight, the
    /// slot's open batch, held meanwhile, is sent now. When `ec` is a timeout, that batch is
    /// returned instead, closed, for the caller to fail with the call's requests.
    batch_ptr call_answered(std::uint16_t slot, error_code ec);
    void send(batch_ptr b);
    /// Answers the batch's requests (`answer`), then keeps its vector for the next batch.
    void complete(batch& b, error_code ec, const redis::reply& r);
    /// Resumes each of the batch's requests with its outcome, or `ec`'s.
    void answer(batch& b, error_code ec, const redis::reply& r);
    /// A script call (RESP) to the primary of `slot` on Cluster, to the one Redis otherwise.
    void call(std::uint16_t slot, std::string_view command, redis::client::handler_type handler);
    /// The slot of `key` on Cluster (redis::key_slot); 0 otherwise, without hashing.
    std::uint16_t slot_of(std::string_view key) const noexcept;
    /// The outcome of a request Redis could not decide, by the failure mode.
    outcome fail(const checks& request_checks, error_code ec);
    /// Records the slots an admitted request took, leased as `<lease_prefix><request_number>`.
    void take_slots(const checks& request_checks,
                    outcome& out,
                    std::string_view lease_prefix,
                    std::size_t request_number);
    static std::string live_name(std::string_view key, std::string_view lease_id);
    /// Runs `script` with `args` (numkeys and on), named as `first_call` says and again the
    /// next way after a refusal (`retry_as`), logging a failure as "could not <what> (<error>):
    /// <otherwise>", rate-limited; then `on_failure`, if given, with the error. The call, and
    /// its sending again, hold `hold` (the exit's wait: `exit_hold_`) until done with.
    void run_script(std::uint16_t slot,
                    const redis::script& script,
                    std::vector<std::string> args,
                    const char* what,
                    const char* otherwise,
                    std::function<void(error_code)> on_failure = {});
    void run_script(std::uint16_t slot,
                    const redis::script& script,
                    redis::script_call how,
                    std::vector<std::string> args,
                    const char* what,
                    const char* otherwise,
                    std::function<void(error_code)> on_failure,
                    std::shared_ptr<void> hold);
    /// How a call of `script` names it first: FCALL while Functions are usable (or the pause
    /// after giving them up has passed) and the script has a library, EVALSHA otherwise.
    redis::script_call first_call(const redis::script& script) noexcept;
    /// When `r`, the reply to a call of a script on `slot` named `how`, says Redis does not know
    /// it so: the way to send the call again (loading the library, or giving up Functions, as
    /// the refusal asks); otherwise none.
    std::optional<redis::script_call>
    retry_as(std::uint16_t slot, redis::script_call how, const redis::reply& r);
    /// FUNCTION LOAD of the limits library on `slot`'s Redis, unless one is in flight.
    void load_functions(std::uint16_t slot);
    /// Calls EVALSHA until `functions_retry_after_` has passed, saying why.
    void give_up_functions(std::string_view why);
    /// Queues a settlement (no token) or a give-back (its token) of `delta` on `key` for
    /// `flush_settlements`.
    void queue_settlement(const std::string& key,
                          const config::limit& l,
                          std::int64_t delta,
                          std::optional<give_back_token> token);
    /// Posts `flush_pending` to run after this turn of the event loop, once however often asked.
    void post_flush(bool& posted, void (redis_store::*flush_pending)());
    void flush_releases();
    /**
     * Releases every CONCURRENCY slot a batch's requests may hold in Redis, when its call
     * failed: the script has run (a reply refused as malformed, an error or a delay out of
     * bound; or its connection was lost before the reply came) or may run yet (a timeout; the
     * release, sent after it on the same connection, runs after it). Left alone, those slots
     * would count against their keys for a whole lease with no request behind them. Releasing
     * a lease never taken frees nothing.
     */
    void release_slots_of_failed(const batch& b);
    /// Queues every slot still held for release and sends the releases.
    void give_back_live_slots();
    /// Lets go of the store's own hold on the exit's wait once no batch is in flight.
    void drop_exit_hold_when_idle();
    /// Queues the CONCURRENCY slots the script may have leased to the `request_number`-th
    /// request of the batch whose lease prefix is `lease_prefix`, and posts `flush_releases`.
    void queue_release_of_slots(const checks& request_checks,
                                std::string_view lease_prefix,
                                std::size_t request_number);
    /**
     * Completes a request of a well-formed reply whose delay breaks its limit's bound
     * (limits_call::delays_within_bounds): counted as a Redis error, logged (throttled), its
     * slots released, and its outcome the failure mode's, as a malformed reply's is.
     */
    void refuse_delay(const batch& b, batch_waiter& w, std::size_t request_number);
    /// Keeps the give-backs of `run` that Redis could not be reached for, to be sent again
    /// (`resend_unsent_releases`) until their leases lapse; at most `max_unsent_releases`.
    void keep_unsent(std::vector<slot_release> run);
    /// Queues the kept give-backs whose leases have not lapsed for `flush_releases` (Redis
    /// answers again, or the store stops) and forgets the rest.
    void requeue_unsent_releases();
    void flush_settlements();
    /// Arms the renewal of every held slot within `lease` / 3 (a slot of that lease was just
    /// taken), unless it is armed to come sooner.
    void schedule_renewal(std::chrono::milliseconds lease);
    void renew_all();

    std::unique_ptr<redis::client> owned_client_;
    std::unique_ptr<redis::cluster_client> owned_cluster_;
    /// Exactly one of these is set.
    redis::client* client_ = nullptr;
    redis::cluster_client* cluster_ = nullptr;
    executor ex_;
    std::chrono::milliseconds ttl_;
    config::failure_mode on_failure_;
    memory_store* local_fallback_;
    std::optional<double> now_override_;
    metrics::registry* metrics_ = nullptr;
    /// FCALL while true; false once Redis showed it has no Functions or refuses them, until
    /// `functions_retry_at_`: a refusal may pass (Redis upgraded to 7 under us, a FUNCTION LOAD
    /// refused for OOM or READONLY during a failover, an ACL changed).
    bool use_functions_ = true;
    bool function_load_pending_ = false;
    std::chrono::steady_clock::time_point functions_retry_at_;
    std::chrono::steady_clock::duration functions_retry_after_ = default_functions_retry_after;
    /// Times Functions were given up: the first is logged at info, the rest (a Redis 6 refusing
    /// every retry) at debug.
    std::uint64_t functions_given_up_ = 0;
    /// The batches taking requests until the flush runs: one per slot (one in all without
    /// Cluster); empty when none is open.
    boost::container::small_vector<batch_ptr, 1> open_;
    bool flush_posted_ = false;
    /// Per slot with calls in flight, how many (one slot, 0, without Cluster).
    boost::container::small_vector<std::pair<std::uint16_t, std::size_t>, 1> in_flight_;
    /// The number of requests in the last batch flushed: the next batch's first guess.
    std::size_t last_batch_size_ = 1;
    /// An answered batch's vector of requests, empty, for the next batch to fill.
    std::vector<batch_waiter> spare_waiters_;
    /// Each limit's arguments in the batches' script calls, written once.
    std::unique_ptr<limits_call::definition_texts> definitions_;
    std::atomic<std::uint64_t> give_backs_sent_{0};
    /// Lets posted flushes and reply callbacks notice that the store is gone.
    std::shared_ptr<redis_store*> self_;
    std::string channel_;
    /// This store's part of every lease id, and the batches sent so far (the next part).
    std::string lease_prefix_;
    std::uint64_t batches_ = 0;
    /// The slots running requests hold, by `live_name`: renewed together every third of the
    /// shortest lease among them. Keyed by text a client chooses: a keyed hash.
    std::unordered_map<std::string, slot, keyed_string_hash, std::equal_to<>> live_slots_;
    /// Slots given back this turn, sent by `flush_releases`.
    std::vector<slot_release> releasing_;
    /// give_back_before_exit was called: slots taken after it go back at once.
    bool exiting_ = false;
    /// Held by every script call sent from give_back_before_exit on, and by the store while a
    /// batch is in flight: when the last lets go, the exit's wait ends (redis_store.cpp).
    std::shared_ptr<void> exit_hold_;
    /// Give-backs whose call could not reach Redis (its connection lost: a failover, a restart,
    /// a reset), sent again after the next reply of a decision call, until their leases lapse
    /// (then Redis has let them go). Without them a slot whose request ended, or whose deciding
    /// call lost its reply, during an outage stayed taken for a whole lease with nothing behind
    /// it. Beyond `max_unsent_releases` they lapse with their lease: an outage must not grow
    /// memory without bound.
    std::vector<slot_release> unsent_releases_;
    bool release_posted_ = false;

    /// A settlement or a give-back waiting for `flush_settlements`, with what the script needs
    /// of its limit.
    struct pending_settlement {
        std::string key;
        int algorithm;
        std::string p1;
        std::string p2;
        /// A settlement's delta; a give-back's amount.
        std::int64_t delta;
        /// Set for a give-back.
        std::optional<give_back_token> token;

        bool same_limit(const pending_settlement& o) const {
            return algorithm == o.algorithm && p1 == o.p1 && p2 == o.p2;
        }
    };

    std::vector<pending_settlement> settling_;
    bool settle_posted_ = false;
    steady_timer renew_timer_;
    bool renewing_ = false;
    /// When the armed renewal comes, while `renewing_`.
    std::chrono::steady_clock::time_point renew_due_;
    bool stopped_ = false;
    /// A bad reply to the limits script, logged: an error reply once per kind and 10 s, a
    /// malformed one once per 10 s (`answer`). The store's own, one per worker: a test's store
    /// then starts with none held back by another's.
    keyed_log_throttle script_errors_{std::chrono::seconds(10)};
    log_throttle malformed_replies_{std::chrono::seconds(10)};
};

/**
 * A started Redis store that owns its client: what the app builds once per worker, on that
 * worker's executor. `local_fallback` serves `on_failure: local` and may be null otherwise.
 */
std::unique_ptr<store>
make_redis_store(executor ex, const config::redis_settings& settings, memory_store* local_fallback);

} // namespace sluice::store
