// SPDX-License-Identifier: Apache-2.0
#include "sluice/store/redis_store.hpp"

#include "sluice/core/log_excerpt.hpp"
#include "sluice/core/log_throttle.hpp"
#include "sluice/core/saturate.hpp"
#include "sluice/limiter/algorithm.hpp"
#include "sluice/limiter/cost.hpp"
#include "sluice/redis/command_writer.hpp"
#include "sluice/redis/scripts.hpp"
#include "sluice/store/slot_waiters.hpp"

#include <boost/asio/post.hpp>
#include <boost/container/small_vector.hpp>
#include <boost/endian/conversion.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string_view>
#include <unordered_map>

namespace sluice::store {
namespace {

using std::chrono::milliseconds;

// The arguments of one limit definition; see the header of src/redis/limits.lua.
constexpr std::size_t definition_size = 6;

// The script's reply per key: allowed, remaining, reset_ms, retry_after_ms, delay_ms, level,
// each a signed 64-bit little-endian integer; a tentative request's keys add their give-back
// token, t1 and t2.
constexpr std::size_t reply_fields = 6;
constexpr std::size_t token_fields = 2;
constexpr std::size_t field_bytes = 8;

int algorithm_code(config::algorithm a) noexcept {
    switch (a) {
    case config::algorithm::leaky_bucket:
        return 1;
    case config::algorithm::token_bucket:
        return 2;
    case config::algorithm::fixed_window:
        return 3;
    case config::algorithm::sliding_window:
        return 4;
    case config::algorithm::concurrency:
        return 5;
    }
    return 0;
}

// The shortest text that reads back as exactly `x` (std::to_chars guarantees the round trip),
// which Lua's tonumber (strtod) reads as the script needs. snprintf's "%.17g" printed the same
// value at eight times the cost: 2.6k instructions a limit definition in every batch, where
// this takes 0.3k (callgrind, bench's Redis case).
std::string format_double(double x) {
    char buffer[32];
    const auto end = std::to_chars(buffer, buffer + sizeof buffer, x).ptr;
    return std::string(buffer, end);
}

// The buckets' rounding in src/limiter/leaky_bucket.cpp, epsilon included: capacity x T is
// rarely exact in binary (21 x 1000 / 0.7 gives 30000.000000000004), and a plain ceil would
// report a window one ms longer than the memory store does.
milliseconds bucket_ceil_ms(double ms) noexcept {
    constexpr double ms_epsilon = 1e-6;
    return saturating_ms(std::ceil(std::max(0.0, ms - ms_epsilon)));
}

// The policy's quota and window, as the C++ algorithms report them (no round trip needed).
void describe_policy(const config::limit& l, limiter::decision& d) noexcept {
    switch (l.algo) {
    case config::algorithm::leaky_bucket:
        d.limit = l.capacity;
        d.window = bucket_ceil_ms(static_cast<double>(l.capacity) * (1000.0 / l.flow_rate));
        break;
    case config::algorithm::token_bucket:
        d.limit = l.capacity;
        d.window = bucket_ceil_ms(static_cast<double>(l.capacity) * (1000.0 / l.refill_rate));
        break;
    case config::algorithm::fixed_window:
    case config::algorithm::sliding_window:
        d.limit = l.limit_count;
        d.window = l.window;
        break;
    case config::algorithm::concurrency:
        d.limit = l.limit_count;
        d.in_flight = true;
        break;
    }
}

// The two numeric parameters of a limit's argument group: {capacity, rate per s} for the
// buckets, {limit, window in ms} for the windows (see the header of src/redis/limits.lua).
std::pair<std::string, std::string> parameters(const config::limit& l) {
    switch (l.algo) {
    case config::algorithm::leaky_bucket:
        return {std::to_string(l.capacity), format_double(l.flow_rate)};
    case config::algorithm::token_bucket:
        return {std::to_string(l.capacity), format_double(l.refill_rate)};
    case config::algorithm::fixed_window:
    case config::algorithm::sliding_window:
        break;
    case config::algorithm::concurrency:
        return {std::to_string(l.limit_count), std::to_string(l.lease.count())};
    }
    return {std::to_string(l.limit_count), std::to_string(l.window.count())};
}

// Whether the script's reply is packed fields of `bytes` bytes in all.
bool well_formed(const redis::reply& r, std::size_t bytes) {
    return r.type == redis::reply::kind::string && r.str.size() == bytes;
}

// Whether a request of cost `cost` can never fit `l` (decision::never_fits): the script refuses
// it without a retry estimate, and the flag follows from the check alone, as the policy does.
bool never_fits(const config::limit& l, std::int64_t cost) noexcept {
    const auto c = limiter::clamp_cost(cost);
    switch (l.algo) {
    case config::algorithm::leaky_bucket:
    case config::algorithm::token_bucket:
        return c > l.capacity;
    case config::algorithm::fixed_window:
    case config::algorithm::sliding_window:
        return c > l.limit_count;
    case config::algorithm::concurrency:
        break;
    }
    return false;
}

// Field `i` of the packed reply (little-endian, whatever the host's order). One load where
// the host is little-endian: assembled byte by byte, the five fields of a decision cost 110
// instructions a request.
std::int64_t field_at(std::string_view packed, std::size_t i) noexcept {
    static_assert(field_bytes == sizeof(std::int64_t));
    return boost::endian::load_little_s64(
        reinterpret_cast<const unsigned char*>(packed.data() + i * field_bytes));
}

// The longest delay the script can give `l`: none unless it shapes (only a LEAKY_BUCKET in
// shape mode delays); then its max-delay, or else the whole bucket's drain time, since a
// request admitted with room waits for fewer than `capacity` slots to leak (limits.lua's
// leak_and_admit, as src/limiter/leaky_bucket.cpp's). With one slot and a millisecond to
// spare: the bound is there to refuse absurd figures, and a reply that rounded otherwise than
// this does must never be taken for one.
milliseconds delay_bound(const config::limit& l) noexcept {
    if (l.algo != config::algorithm::leaky_bucket || l.mode != config::shaping_mode::shape) {
        return milliseconds{0};
    }
    const double slot_ms = 1000.0 / l.flow_rate;
    const double bound_ms = l.max_delay ? static_cast<double>(l.max_delay->count()) + slot_ms
                                        : (static_cast<double>(l.capacity) + 1.0) * slot_ms;
    return bucket_ceil_ms(bound_ms + 1.0); // saturates
}

// Whether every delay in the reply is within [0, delay_bound] of its limit. Redis's reply is
// input like any other: a delay beyond it would overflow the hold's end (now + delay) or hold a
// request for years. One that breaks the bound says the script, or the state it read, is not
// what this store wrote (a clock set back past a stored time could do it too), so it is
// treated as the malformed reply it is, bad_reply and the failure mode, rather than clamped
// into a decision taken from a state we have reason to doubt. `Waiters` is the batch's.
template <typename Waiters>
bool delays_within_bounds(std::string_view packed, const Waiters& waiters) noexcept {
    std::size_t field = 0;
    for (const auto& w : waiters) {
        const std::size_t stride = w.give_backs ? reply_fields + token_fields : reply_fields;
        for (const auto& c : *w.request_checks) {
            const auto delay = field_at(packed, field + 4);
            if (delay < 0 || delay > delay_bound(*c.limit).count()) {
                return false;
            }
            field += stride;
        }
    }
    return true;
}

// Writes into `out` the decisions of one request, from the reply's fields starting at `field`,
// `stride` per key.
void decisions_at(std::string_view packed,
                  std::size_t field,
                  const checks& request_checks,
                  std::size_t stride,
                  outcome& out) {
    // Emptied in place: assigning outcome{} moved two empty small_vectors over it, a costly
    // no-op (130 instructions a request).
    out.ec = {};
    out.decisions.clear();
    out.slots.clear();
    out.local = false;
    for (const auto& c : request_checks) {
        limiter::decision d;
        describe_policy(*c.limit, d);
        d.allowed = field_at(packed, field) == 1;
        d.remaining = field_at(packed, field + 1);
        d.reset_after = milliseconds{field_at(packed, field + 2)};
        d.retry_after = milliseconds{field_at(packed, field + 3)};
        d.delay = milliseconds{field_at(packed, field + 4)};
        d.never_fits = never_fits(*c.limit, c.cost);
        out.decisions.push_back(d);
        field += stride;
    }
}

// Whether the script charged the request: every limit that is not dry-run admitted it.
bool admitted(const checks& request_checks, const outcome& out) noexcept {
    for (std::size_t i = 0; i < request_checks.size(); ++i) {
        if (!out.decisions[i].allowed && !request_checks[i].limit->dry_run) {
            return false;
        }
    }
    return true;
}

// What giving back a tentative request's charges takes, from its keys' tokens (each key's
// fields start at `field`, `stride` apart): a limit is charged when the request is, it admitted,
// and it is the last of the request's checks on its key (phase 2 of the script writes only
// that one). CONCURRENCY slots are not entries: they are the outcome's `slots`.
std::vector<give_back_entry> give_backs_at(std::string_view packed,
                                           std::size_t field,
                                           const checks& request_checks,
                                           const outcome& out,
                                           std::size_t stride) {
    std::vector<give_back_entry> entries;
    if (!admitted(request_checks, out)) {
        return entries;
    }
    for (std::size_t i = 0; i < request_checks.size(); ++i, field += stride) {
        const auto& c = request_checks[i];
        const bool last = std::none_of(request_checks.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                       request_checks.end(),
                                       [&](const check& later) { return later.key == c.key; });
        if (out.decisions[i].allowed && last && c.limit->algo != config::algorithm::concurrency) {
            entries.push_back({c.key,
                               c.limit,
                               limiter::clamp_cost(c.cost),
                               {field_at(packed, field + reply_fields),
                                field_at(packed, field + reply_fields + 1)}});
        }
    }
    return entries;
}

// Writes a limit's definition: algorithm, p1, p2, mode, max_delay, dry_run.
void write_definition(redis::command_writer& w, const config::limit& l) {
    const auto [p1, p2] = parameters(l);
    w.arg(algorithm_code(l.algo));
    w.arg(p1);
    w.arg(p2);
    w.arg(l.mode == config::shaping_mode::shape ? "0" : "1");
    w.arg(l.max_delay ? l.max_delay->count() : std::int64_t{-1});
    w.arg(l.dry_run ? "1" : "0");
}

// Fills a request batch's packed argument in the space the command writer made for it
// (redis::command_writer::space): plain stores, rather than an append into the command for each
// of a request's three numbers.
struct packed_cursor {
    char* at;

    void append(std::string_view bytes) noexcept { at = std::copy(bytes.begin(), bytes.end(), at); }
};

// Appends `v` as the script's packed numbers are: 32 bits, little-endian. `Out` is a
// packed_cursor or an argument built apart (std::string).
template <typename Out>
void append_u32(Out& out, std::uint64_t v) {
    const char bytes[4] = {static_cast<char>(v & 0xff),
                           static_cast<char>((v >> 8) & 0xff),
                           static_cast<char>((v >> 16) & 0xff),
                           static_cast<char>((v >> 24) & 0xff)};
    out.append(std::string_view(bytes, sizeof bytes));
}

// The packed groups' flags (see the header of src/redis/limits.lua).
constexpr std::uint64_t amount_follows = std::uint64_t{1} << 31;
constexpr std::uint64_t negative_amount = std::uint64_t{1} << 30;
constexpr std::uint64_t tentative_group = std::uint64_t{1} << 30;
constexpr std::uint64_t settlements_group = std::uint64_t{1} << 31;
constexpr std::uint64_t give_backs_group = settlements_group | tentative_group;

// The bytes of one entry of the packed groups: a request's key of cost 1 costs no amount.
constexpr std::size_t entry_bytes(bool with_amount) noexcept {
    return with_amount ? 16 : 8;
}

// Appends one entry: the key's and the definition's numbers, and `amount` when `with_amount`
// (|amount| <= 2^53: limiter::clamp_cost and clamp_delta bound it).
template <typename Out>
void append_entry(
    Out& out, std::size_t key, std::size_t definition, bool with_amount, std::int64_t amount) {
    append_u32(out, key);
    if (!with_amount) {
        append_u32(out, definition);
        return;
    }
    const std::uint64_t magnitude = amount < 0
                                        ? std::uint64_t{0} - static_cast<std::uint64_t>(amount)
                                        : static_cast<std::uint64_t>(amount);
    append_u32(out, definition | amount_follows | (amount < 0 ? negative_amount : 0));
    append_u32(out, magnitude & 0xffffffff);
    append_u32(out, magnitude >> 32);
}

// A give-back token's bytes in the packed groups: t1 and t2, 64 bits each.
constexpr std::size_t token_bytes = token_fields * field_bytes;

// Appends a give-back token: t1 and t2, each as 64 bits (two's complement) in two numbers.
template <typename Out>
void append_token(Out& out, const give_back_token& token) {
    for (const std::int64_t t : {token.t1, token.t2}) {
        const auto bits = static_cast<std::uint64_t>(t);
        append_u32(out, bits & 0xffffffff);
        append_u32(out, bits >> 32);
    }
}

// A prefix no other store shares, in this process or another: 64 random bits. Built once per
// store, at start-up.
std::string make_lease_prefix() {
    std::random_device source;
    const std::uint64_t bits = (std::uint64_t{source()} << 32) | source();
    char text[24];
    const int n =
        std::snprintf(text, sizeof text, "%016llx:", static_cast<unsigned long long>(bits));
    return std::string(text, static_cast<std::size_t>(std::max(n, 0)));
}

// A script call may touch one Cluster slot's keys only (CROSSSLOT otherwise): what is sent of
// `items` in one call is a run of items sharing a slot. Orders `items` so that each slot's
// are together, each slot's in their order (a settlement and a give-back of one key keep theirs).
template <typename T, typename SlotOf>
void group_by_slot(std::vector<T>& items, SlotOf slot_of) {
    std::stable_sort(items.begin(), items.end(), [&](const T& a, const T& b) {
        return slot_of(a) < slot_of(b);
    });
}

// How many of `items`, from the first, share its slot: at most `limit`.
template <typename T, typename SlotOf>
std::size_t leading_run(const std::vector<T>& items, SlotOf slot_of, std::size_t limit) {
    const auto first = slot_of(items.front());
    std::size_t n = 1;
    while (n < items.size() && n < limit && slot_of(items[n]) == first) {
        ++n;
    }
    return n;
}

// The open batches and the calls in flight, per slot: an entry only while a slot has one,
// one slot in all without Cluster, so a linear search.
template <typename Batch>
std::uint16_t entry_slot(const std::shared_ptr<Batch>& b) {
    return b->slot;
}

std::uint16_t entry_slot(const std::pair<std::uint16_t, std::size_t>& calls) {
    return calls.first;
}

template <typename Entries>
auto entry_of(Entries& entries, std::uint16_t slot) {
    return std::find_if(
        entries.begin(), entries.end(), [slot](const auto& e) { return entry_slot(e) == slot; });
}

} // namespace

/**
 * Each limit's definition in a batch's script call (write_definition's arguments, in RESP),
 * written once and spliced into every call that names the limit: writing it, its rate printed
 * as the shortest double, cost some 1.5k instructions per limit and batch. Found by the limit's
 * address, and used only while the limit still says what it said when written: a reload frees
 * the old limits, and a new one may take an old one's address.
 */
class redis_store::definition_texts {
public:
    std::string_view of(const config::limit& l) {
        auto it = texts_.find(&l);
        if (it != texts_.end() && it->second.said == limit_fields{l}) {
            return it->second.text;
        }
        if (it == texts_.end() && texts_.size() >= max_texts) {
            texts_.clear(); // the limits of configs long gone
        }
        std::string text;
        auto w = redis::command_writer::arguments_only(text);
        write_definition(w, l);
        const auto at = texts_.insert_or_assign(&l, entry{limit_fields{l}, std::move(text)}).first;
        return at->second.text;
    }

private:
    // What write_definition reads of a limit.
    struct limit_fields {
        explicit limit_fields(const config::limit& l)
            : algo(l.algo)
            , capacity(l.capacity)
            , limit_count(l.limit_count)
            , flow_rate(l.flow_rate)
            , refill_rate(l.refill_rate)
            , window(l.window)
            , lease(l.lease)
            , mode(l.mode)
            , max_delay(l.max_delay)
            , dry_run(l.dry_run) {}

        bool operator==(const limit_fields&) const = default;

        config::algorithm algo;
        std::int64_t capacity;
        std::int64_t limit_count;
        double flow_rate;
        double refill_rate;
        milliseconds window;
        milliseconds lease;
        config::shaping_mode mode;
        std::optional<milliseconds> max_delay;
        bool dry_run;
    };

    struct entry {
        limit_fields said;
        std::string text;
    };

    // Far more limits than a config has: only reloads add more.
    static constexpr std::size_t max_texts = 4096;

    std::unordered_map<const config::limit*, entry> texts_;
};

/// A request waiting for its batch's reply. Its checks and the place for its outcome are its
/// coroutine's, alive as long as `handler` (which owns the coroutine's frame) is: the handler
/// leaves the waiter only to be called, once the outcome is written.
struct redis_store::batch_waiter {
    const checks* request_checks = nullptr;
    outcome* out = nullptr;
    net::any_completion_handler<void()> handler;
    /// Set for a tentative request: receives its give-back entries before `handler` runs.
    std::shared_ptr<std::vector<give_back_entry>> give_backs;
    /// A part of a request split across slots: a failure completes it with the error.
    bool part = false;
};

/// Requests sharing one script call, and the call's arguments once it is built.
struct redis_store::batch {
    using waiter = batch_waiter;

    /// The Cluster slot of every key of this batch's requests (0 without Cluster).
    std::uint16_t slot = 0;

    std::vector<waiter> waiters;
    /// The reply's size in bytes: `reply_fields` per check of every waiter (KEYS holds each key
    /// once, the reply each check), and `token_fields` more per check of a tentative request.
    std::size_t reply_size = 0;
    /// The script call in RESP (see `format`).
    std::string command;
    std::chrono::steady_clock::time_point sent;
    /// How the call names the script (FCALL first, then the fallbacks a refusal leads to).
    redis::script_call how = redis::script_call::fcall;
    /// Unique to this batch: its i-th request's slots are leased as `<lease_prefix><i>`.
    std::string lease_prefix;

    /**
     * The script call deciding this batch, with `verb` and `script` its first two arguments
     * (`redis::script_call_head`; see the header of src/redis/limits.lua): the batch's distinct
     * keys, its distinct limits, then its requests packed into one argument, each as its number of
     * keys and, per key, the key's and the limit's numbers.
     */
    void format(std::string_view verb,
                std::string_view script,
                std::optional<double> now,
                milliseconds ttl,
                definition_texts& texts) {
        // A burst from one client repeats one key: each distinct key and limit goes once.
        boost::container::small_vector<const config::limit*, 8> definitions;
        boost::container::small_vector<std::string_view, 16> keys;
        boost::container::small_vector<std::size_t, 16> key_hashes;
        boost::container::small_vector<std::pair<std::uint32_t, std::uint32_t>, 64> numbers;
        std::size_t packed_bytes = 0;
        reply_size = 0;
        for (const auto& w : waiters) {
            reply_size += w.request_checks->size() * field_bytes *
                          (w.give_backs ? reply_fields + token_fields : reply_fields);
            for (const auto& c : *w.request_checks) {
                auto d = std::find(definitions.begin(), definitions.end(), c.limit);
                if (d == definitions.end()) {
                    definitions.push_back(c.limit);
                    d = definitions.end() - 1;
                }
                const std::string_view key = c.key;
                const std::size_t hash = std::hash<std::string_view>{}(key);
                std::size_t k = 0;
                while (k < keys.size() && (key_hashes[k] != hash || keys[k] != key)) {
                    ++k;
                }
                if (k == keys.size()) {
                    keys.push_back(key);
                    key_hashes.push_back(hash);
                }
                numbers.emplace_back(static_cast<std::uint32_t>(k + 1),
                                     static_cast<std::uint32_t>(d - definitions.begin() + 1));
                packed_bytes += entry_bytes(limiter::clamp_cost(c.cost) != 1);
            }
        }

        std::size_t key_bytes = 0;
        for (const auto key : keys) {
            key_bytes += key.size();
        }
        const std::size_t argc = 3 + keys.size() + 3 + definitions.size() * definition_size + 2;
        // Room for all of it at once, where growing by doubling copied the command six times
        // over in a batch of 26 requests. At most 26 bytes of framing per argument ("$", 20
        // digits, two CRLFs) and 24 of text per number (a definition's, `now`, the ttl).
        command.clear();
        command.reserve(16 + argc * (26 + 24) + verb.size() + script.size() + key_bytes +
                        4 * waiters.size() + packed_bytes + lease_prefix.size());
        redis::command_writer w(command, argc);
        w.arg(verb);
        w.arg(script);
        w.arg(static_cast<std::int64_t>(keys.size()));
        for (const auto key : keys) {
            w.arg(key);
        }
        w.arg(now ? format_double(*now) : std::string_view());
        w.arg(ttl.count());
        w.arg(static_cast<std::int64_t>(definitions.size()));
        for (const auto* l : definitions) {
            w.splice(texts.of(*l));
        }
        const std::size_t packed_size = 4 * waiters.size() + packed_bytes;
        w.begin_arg(packed_size);
        packed_cursor packed{w.space(packed_size)};
        std::size_t next = 0;
        for (const auto& wt : waiters) {
            const auto& request_checks = *wt.request_checks;
            append_u32(packed, (wt.give_backs ? tentative_group : 0) | request_checks.size());
            for (std::size_t i = 0; i < request_checks.size(); ++i, ++next) {
                const auto cost = limiter::clamp_cost(request_checks[i].cost);
                append_entry(packed, numbers[next].first, numbers[next].second, cost != 1, cost);
            }
        }
        w.end_arg();
        w.arg(lease_prefix);
    }
};

namespace {

// The outcome of a request that was not decided at all: `ec`, no decisions.
outcome undecided(error_code ec) {
    outcome out;
    out.ec = ec;
    return out;
}

// Resumes a waiting request with its outcome, written where the request waits for it. Called
// directly, not dispatched: the store runs on the thread of the requests it serves (see the
// header), where dispatch would run it inline anyway.
void resume(net::any_completion_handler<void()>& handler, outcome& place, outcome&& out) {
    place = std::move(out);
    std::move(handler)();
}

} // namespace

namespace {

void load_scripts(auto& connection) {
    connection.add_connect_command({"SCRIPT", "LOAD", std::string(redis::limits_script.text)});
    connection.add_connect_command({"SCRIPT", "LOAD", std::string(redis::slots_script.text)});
    // Refused when the library is there already (loaded by another connection), and by a Redis
    // before 7 or an ACL: the first FCALL tells which (see `retry_as`).
    connection.add_connect_command({"FUNCTION", "LOAD", std::string(redis::limits_script.library)},
                                   redis::if_refused::carry_on);
}

} // namespace

redis_store::redis_store(unconnected,
                         executor ex,
                         const config::redis_settings& settings,
                         memory_store* local_fallback)
    : ex_(std::move(ex))
    , ttl_(settings.ttl)
    , on_failure_(settings.on_failure)
    , local_fallback_(local_fallback)
    , definitions_(std::make_unique<definition_texts>())
    , self_(std::make_shared<redis_store*>(this))
    , channel_(slot_channel(settings))
    , lease_prefix_(make_lease_prefix())
    , renew_timer_(ex_) {}

redis_store::redis_store(redis::client& client,
                         const config::redis_settings& settings,
                         memory_store* local_fallback)
    : redis_store(unconnected{}, client.get_executor(), settings, local_fallback) {
    client_ = &client;
    load_scripts(client);
}

redis_store::redis_store(redis::cluster_client& cluster,
                         const config::redis_settings& settings,
                         memory_store* local_fallback)
    : redis_store(unconnected{}, cluster.get_executor(), settings, local_fallback) {
    cluster_ = &cluster;
    load_scripts(cluster);
}

redis_store::redis_store(executor ex,
                         const config::redis_settings& settings,
                         memory_store* local_fallback)
    : redis_store(unconnected{}, ex, settings, local_fallback) {
    if (settings.topology == config::redis_topology::cluster) {
        owned_cluster_ = std::make_unique<redis::cluster_client>(
            std::move(ex), redis::cluster_options::from_settings(settings));
        cluster_ = owned_cluster_.get();
        load_scripts(*cluster_);
        cluster_->start();
        return;
    }
    owned_client_ = std::make_unique<redis::client>(std::move(ex),
                                                    redis::client_options::from_settings(settings));
    client_ = owned_client_.get();
    load_scripts(*client_);
    client_->start();
}

redis_store::~redis_store() {
    // Requests still waiting for a flush would never be resumed: end them as unavailable.
    for (auto& b : open_) {
        for (auto& w : b->waiters) {
            *w.out = undecided(errc::redis_unavailable);
            net::post(ex_, std::move(w.handler));
        }
    }
}

void redis_store::set_metrics(metrics::registry* registry) {
    metrics_ = registry;
    if (cluster_ == nullptr || registry == nullptr) {
        return;
    }
    redis::cluster_observer o;
    o.moved = &registry->redis_moved_total;
    o.ask = &registry->redis_ask_total;
    o.tryagain = &registry->redis_tryagain_total;
    o.map_changed = &registry->redis_map_changed_total;
    o.map_unchanged = &registry->redis_map_unchanged_total;
    o.map_failed = &registry->redis_map_failed_total;
    o.failovers = &registry->redis_failovers_total;
    o.calls_to = [registry](const std::string& node) {
        return &registry->redis_node_calls(node);
    };
    cluster_->set_observer(std::move(o));
}

bool redis_store::connected() const noexcept {
    return cluster_ != nullptr ? cluster_->healthy() : client_->connected();
}

std::uint16_t redis_store::slot_of(std::string_view key) const noexcept {
    return cluster_ != nullptr ? redis::key_slot(key) : 0;
}

void redis_store::call(std::uint16_t slot,
                       std::string_view command,
                       redis::client::handler_type handler) {
    if (cluster_ != nullptr) {
        cluster_->async_formatted(slot, command, std::move(handler));
    } else {
        client_->async_formatted(command, std::move(handler));
    }
}

awaitable<outcome> redis_store::acquire(checks request_checks) {
    outcome out;
    co_await acquire_into(request_checks, out);
    co_return out;
}

awaitable<void> redis_store::acquire_into(const checks& request_checks, outcome& out) {
    // Not a coroutine: the request's own coroutine waits for the batch's reply directly, and
    // the reply is decoded into `out` where it waits. Moving the checks into the batch and the
    // outcome back out through Asio's handlers (an any_completion_handler<void(outcome)>, the
    // awaitable's result, the caller's copy) cost 0.7k instructions a request.
    net::use_awaitable_t<io_executor> token;
    return net::async_initiate<net::use_awaitable_t<io_executor>, void()>(
        [this, &request_checks, &out](auto handler) {
            if (request_checks.empty()) {
                out = outcome{};
                net::post(ex_, std::move(handler));
                return;
            }
            enqueue(request_checks, out, std::move(handler));
        },
        token);
}

awaitable<redis_store::tentative_outcome>
redis_store::acquire_tentative_for_test(checks request_checks) {
    if (request_checks.empty()) {
        co_return tentative_outcome{};
    }
    auto give_backs = std::make_shared<std::vector<give_back_entry>>();
    outcome decided;
    auto initiate = [this, &request_checks, &decided, give_backs](auto handler) {
        enqueue(request_checks, decided, std::move(handler), give_backs);
    };
    net::use_awaitable_t<io_executor> token;
    co_await net::async_initiate<net::use_awaitable_t<io_executor>, void()>(std::move(initiate),
                                                                            token);
    co_return tentative_outcome{std::move(decided), std::move(*give_backs)};
}

void redis_store::enqueue(const checks& request_checks,
                          outcome& out,
                          net::any_completion_handler<void()> handler,
                          std::shared_ptr<std::vector<give_back_entry>> give_backs) {
    const auto slot = slot_of(request_checks.front().key);
    if (cluster_ != nullptr && !give_backs &&
        std::any_of(request_checks.begin() + 1, request_checks.end(), [&](const check& c) {
            return redis::key_slot(c.key) != slot;
        })) {
        split(request_checks, out, std::move(handler));
        return;
    }
    add_to_batch(slot, request_checks, out, std::move(handler), std::move(give_backs), false);
}

void redis_store::add_to_batch(std::uint16_t slot,
                               const checks& request_checks,
                               outcome& out,
                               net::any_completion_handler<void()> handler,
                               std::shared_ptr<std::vector<give_back_entry>> give_backs,
                               bool part) {
    auto open = entry_of(open_, slot);
    if (open == open_.end()) {
        open_.push_back(std::make_shared<batch>());
        open_.back()->slot = slot;
        // The vector of a batch already answered, with room for as many as the last batch
        // held: the next is most often as large. Growing it anew moved each request's waiter
        // once more, and its allocations (some KiB) came from malloc's slow path.
        open_.back()->waiters.swap(spare_waiters_);
        open_.back()->waiters.reserve(last_batch_size_);
        open = open_.end() - 1;
    }
    if (!flush_posted_ && calls_in_flight(slot) == 0) {
        // The flush runs after the handlers that are ready now: the requests they read join.
        // (With a call in flight, its reply sends the batch: see `call_answered`.)
        flush_posted_ = true;
        net::post(ex_, [alive = std::weak_ptr(self_)] {
            if (const auto self = alive.lock()) {
                (*self)->flush();
            }
        });
    }
    auto& b = **open;
    b.waiters.emplace_back(&request_checks, &out, std::move(handler), std::move(give_backs), part);
    if (b.waiters.size() >= max_batch) {
        auto full = std::move(*open);
        open_.erase(open);
        flush_batch(std::move(full));
    }
}

/// A request split across Cluster slots, until every part is decided. Its checks and the place
/// for its outcome are the waiting coroutine's, alive as long as `handler` is.
struct redis_store::joint {
    struct part {
        std::uint16_t slot = 0;
        /// The request's checks on this slot, in their order, and where each came from.
        checks part_checks;
        boost::container::small_vector<std::size_t, 2> indices;
        outcome decided;
        std::shared_ptr<std::vector<give_back_entry>> give_backs =
            std::make_shared<std::vector<give_back_entry>>();
    };

    // Move-constructed: Boost 1.81's any_completion_handler assignment wraps the handler in
    // another one instead of moving it.
    joint(const checks& c, outcome& o, net::any_completion_handler<void()> h)
        : request_checks(c)
        , out(o)
        , handler(std::move(h)) {}

    const checks& request_checks;
    outcome& out;
    net::any_completion_handler<void()> handler;
    boost::container::small_vector<part, 2> parts;
    std::size_t waiting = 0;
};

void redis_store::split(const checks& request_checks,
                        outcome& out,
                        net::any_completion_handler<void()> handler) {
    auto j = std::make_shared<joint>(request_checks, out, std::move(handler));
    for (std::size_t i = 0; i < request_checks.size(); ++i) {
        const auto slot = redis::key_slot(request_checks[i].key);
        auto p = std::find_if(j->parts.begin(), j->parts.end(), [slot](const joint::part& x) {
            return x.slot == slot;
        });
        if (p == j->parts.end()) {
            j->parts.emplace_back();
            p = j->parts.end() - 1;
            p->slot = slot;
        }
        p->part_checks.push_back(request_checks[i]);
        p->indices.push_back(i);
    }
    j->waiting = j->parts.size();
    // Every part is in place before the first is enqueued: its checks and outcome are pointed
    // to, and `parts` must not grow after.
    for (auto& p : j->parts) {
        net::any_completion_handler<void()> on_part = [alive = std::weak_ptr(self_), j]() {
            if (--j->waiting > 0) {
                return;
            }
            if (const auto self = alive.lock()) {
                (*self)->finish_joint(*j);
                return;
            }
            resume(j->handler, j->out, undecided(errc::redis_unavailable));
        };
        add_to_batch(p.slot, p.part_checks, p.decided, std::move(on_part), p.give_backs, true);
    }
}

void redis_store::finish_joint(joint& j) {
    error_code ec;
    for (const auto& p : j.parts) {
        ec = ec ? ec : p.decided.ec;
    }
    // What the parts that admitted took goes back when the request is not admitted as a whole:
    // their slots always (a request the failure mode decides holds none), their charges unless
    // `open` forwards the request anyway. A part without an answer is never given back: it may
    // not have charged, and returning a charge never made would admit more than the limit.
    const auto give_back_admitted = [&](bool charges) {
        bool any = false;
        for (auto& p : j.parts) {
            if (p.decided.ec || !admitted(p.part_checks, p.decided)) {
                continue;
            }
            release(p.decided.slots);
            if (charges) {
                give_back(*p.give_backs);
                any = any || !p.give_backs->empty() || !p.decided.slots.empty();
            }
        }
        if (any) {
            give_backs_sent_.fetch_add(1, std::memory_order_relaxed);
            if (metrics_ != nullptr) {
                metrics::bump(metrics_->redis_give_backs_total);
            }
        }
    };
    if (ec) {
        give_back_admitted(on_failure_ != config::failure_mode::open);
        resume(j.handler, j.out, fail(j.request_checks, ec));
        return;
    }
    outcome out;
    out.decisions.resize(j.request_checks.size());
    for (auto& p : j.parts) {
        for (std::size_t k = 0; k < p.indices.size(); ++k) {
            out.decisions[p.indices[k]] = p.decided.decisions[k];
        }
    }
    if (!admitted(j.request_checks, out)) {
        give_back_admitted(true);
        resume(j.handler, j.out, std::move(out));
        return;
    }
    for (auto& p : j.parts) {
        for (auto& taken : p.decided.slots) {
            out.slots.push_back(std::move(taken));
        }
    }
    resume(j.handler, j.out, std::move(out));
}

void redis_store::flush() {
    flush_posted_ = false;
    auto batches = std::move(open_); // leaves open_ empty: the next request opens a new batch
    open_.clear();
    for (auto& b : batches) {
        if (calls_in_flight(b->slot) > 0) {
            open_.push_back(std::move(b)); // held until the reply: see `call_answered`
            continue;
        }
        flush_batch(std::move(b));
    }
}

std::size_t redis_store::calls_in_flight(std::uint16_t slot) const noexcept {
    const auto it = entry_of(in_flight_, slot);
    return it == in_flight_.end() ? 0 : it->second;
}

redis_store::batch_ptr redis_store::call_answered(std::uint16_t slot, error_code ec) {
    const auto it = entry_of(in_flight_, slot);
    if (it != in_flight_.end() && --it->second == 0) {
        in_flight_.erase(it);
    }
    // Every request held came after the call that timed out was sent: failing them with it
    // keeps each within its own `timeout`, where sending them would give them one more.
    const bool fail_along = ec == errc::redis_timeout;
    const auto open = entry_of(open_, slot);
    if (open == open_.end() || (!fail_along && calls_in_flight(slot) > 0)) {
        return nullptr;
    }
    auto held = std::move(*open);
    open_.erase(open);
    if (fail_along) {
        return held;
    }
    flush_batch(std::move(held));
    return nullptr;
}

void redis_store::flush_batch(batch_ptr b) {
    last_batch_size_ = b->waiters.size();
    const auto it = entry_of(in_flight_, b->slot);
    if (it == in_flight_.end()) {
        in_flight_.emplace_back(b->slot, 1);
    } else {
        ++it->second;
    }
    b->lease_prefix = lease_prefix_ + std::to_string(++batches_) + ':';
    b->how = first_call(redis::limits_script);
    const auto [verb, script] = redis::script_call_head(b->how, redis::limits_script);
    b->format(verb, script, now_override_, ttl_, *definitions_);
    send(std::move(b));
}

redis::script_call redis_store::first_call(const redis::script& script) noexcept {
    // Read the clock only while Functions are given up: the usual call pays one branch.
    if (!use_functions_ && std::chrono::steady_clock::now() >= functions_retry_at_) {
        use_functions_ = true;
    }
    return use_functions_ && !script.function_name.empty() ? redis::script_call::fcall
                                                           : redis::script_call::evalsha;
}

std::optional<redis::script_call>
redis_store::retry_as(std::uint16_t slot, redis::script_call how, const redis::reply& r) {
    switch (redis::refusal_of(how, r)) {
    case redis::script_refusal::none:
        return std::nullopt;
    case redis::script_refusal::function_missing:
        load_functions(slot);
        return redis::script_call::evalsha;
    case redis::script_refusal::functions_unusable:
        give_up_functions(r.str);
        return redis::script_call::evalsha;
    case redis::script_refusal::noscript:
        break;
    }
    return redis::script_call::eval;
}

void redis_store::load_functions(std::uint16_t slot) {
    if (function_load_pending_ || !use_functions_) {
        return;
    }
    function_load_pending_ = true;
    std::string command;
    redis::command_writer w(command, 3);
    w.arg("FUNCTION");
    w.arg("LOAD");
    w.arg(redis::limits_script.library);
    call(slot, command, [alive = std::weak_ptr(self_)](error_code ec, redis::reply r) {
        const auto self = alive.lock();
        if (!self) {
            return;
        }
        auto& owner = **self;
        owner.function_load_pending_ = false;
        // Another worker or instance of this version loaded it first: as good as loading it.
        if (ec == errc::bad_reply && r.str.find("already exists") != std::string::npos) {
            return;
        }
        if (ec == errc::bad_reply) {
            // Refused (an ACL, out of memory, ...): EVALSHA from now on, at the cost of the
            // script's prelude per call, rather than a refused FCALL and a retry per call.
            owner.give_up_functions(r.str);
        }
        // Otherwise loaded, or no answer (the connection went): the next FCALL finds out.
    });
}

void redis_store::give_up_functions(std::string_view why) {
    if (!use_functions_) {
        return;
    }
    use_functions_ = false;
    functions_retry_at_ = std::chrono::steady_clock::now() + functions_retry_after_;
    // From Redis (not from a client), once a minute per worker at most. The first time says it
    // at info; a Redis that keeps refusing (before 7, say) says it again only at debug.
    static keyed_log_throttle gave_up{std::chrono::seconds(10)};
    log_throttled(gave_up,
                  ++functions_given_up_ == 1 ? spdlog::level::info : spdlog::level::debug,
                  "redis store: Redis Functions unusable ({}): deciding with EVALSHA, trying "
                  "them again in {} s",
                  log_excerpt(why),
                  std::chrono::ceil<std::chrono::seconds>(functions_retry_after_).count());
}

void redis_store::send(batch_ptr b) {
    b->sent = std::chrono::steady_clock::now();
    const auto slot = b->slot;
    const std::string_view command = b->command;
    call(slot, command, [alive = std::weak_ptr(self_), b](error_code ec, redis::reply r) mutable {
        const auto self = alive.lock();
        if (!self) {
            for (auto& w : b->waiters) {
                resume(w.handler, *w.out, undecided(errc::redis_unavailable));
            }
            return;
        }
        auto& owner = **self;
        if (owner.metrics_ != nullptr) {
            owner.metrics_->redis_latency.observe(std::chrono::steady_clock::now() - b->sent);
        }
        if (const auto next = owner.retry_as(b->slot, b->how, r)) {
            // Redis does not know the script by this name: the same batch, named the next way.
            b->how = *next;
            const auto [verb, script] = redis::script_call_head(b->how, redis::limits_script);
            b->format(verb, script, owner.now_override_, owner.ttl_, *owner.definitions_);
            owner.send(std::move(b));
            return;
        }
        // The batch held behind this call is sent first, so that Redis decides it while this
        // one's requests are resumed; after a timeout it fails, after them.
        const auto failed_along = owner.call_answered(b->slot, ec);
        owner.complete(*b, ec, r);
        if (failed_along) {
            owner.complete(*failed_along, ec, redis::reply{});
        }
    });
}

void redis_store::complete(batch& b, error_code ec, const redis::reply& r) {
    answer(b, ec, r);
    // Kept for the next batch: only the largest, so that one outsized batch is all it holds.
    b.waiters.clear();
    if (b.waiters.capacity() > spare_waiters_.capacity()) {
        spare_waiters_.swap(b.waiters);
    }
}

void redis_store::answer(batch& b, error_code ec, const redis::reply& r) {
    if (!ec && (!well_formed(r, b.reply_size) || !delays_within_bounds(r.str, b.waiters))) {
        ec = errc::bad_reply;
    }
    if (ec) {
        if (metrics_ != nullptr) {
            metrics::bump(ec == errc::redis_timeout ? metrics_->redis_timeouts_total
                                                    : metrics_->redis_errors_total);
        }
        // Unavailability is the client's to report (once per outage); a bad reply is a bug or
        // a misconfiguration an operator must see, but not once per request. An error reply:
        // each kind (OOM, BUSY, ERR, ...) once per 10 s, so one does not hide another, with its
        // count; by kind, not by text, which may differ every time (a number, a key, a line)
        // and would give each reply a line. A malformed one: one line per 10 s in all. Either
        // shows at most 128 bytes of the reply: a reply may be as large as Redis allows.
        if (ec == errc::bad_reply && r.is_error()) {
            static keyed_log_throttle by_kind{std::chrono::seconds(10)};
            log_throttled_by(by_kind,
                             r.error_kind(),
                             spdlog::level::warn,
                             "redis store: the limits script failed: {}",
                             log_excerpt(r.str));
        } else if (ec == errc::bad_reply) {
            static log_throttle malformed{std::chrono::seconds(10)};
            log_throttled(malformed,
                          spdlog::level::warn,
                          "redis store: unexpected reply to the limits script: {}",
                          log_excerpt(r.describe(log_excerpt_bytes)));
        }
        for (auto& w : b.waiters) {
            if (w.part) {
                resume(w.handler, *w.out, undecided(ec));
                continue;
            }
            resume(w.handler, *w.out, fail(*w.request_checks, ec));
        }
        return;
    }
    std::size_t field = 0;
    std::size_t request_number = 0;
    for (auto& w : b.waiters) {
        const auto& request_checks = *w.request_checks;
        auto& out = *w.out;
        const std::size_t stride = w.give_backs ? reply_fields + token_fields : reply_fields;
        decisions_at(r.str, field, request_checks, stride, out);
        if (w.give_backs) {
            *w.give_backs = give_backs_at(r.str, field, request_checks, out, stride);
        }
        field += request_checks.size() * stride;
        take_slots(request_checks, out, b.lease_prefix, ++request_number);
        std::move(w.handler)();
    }
}

void redis_store::take_slots(const checks& request_checks,
                             outcome& out,
                             std::string_view lease_prefix,
                             std::size_t request_number) {
    if (!admitted(request_checks, out)) {
        return; // refused: the script took nothing
    }
    // Made only for a request that took a slot: a string per request (an allocation, as the
    // prefix is longer than the short-string buffer) cost every request 320 instructions.
    std::string id;
    for (std::size_t i = 0; i < request_checks.size(); ++i) {
        const auto& l = *request_checks[i].limit;
        if (out.decisions[i].in_flight && out.decisions[i].allowed) {
            if (id.empty()) {
                id.reserve(lease_prefix.size() + 20);
                id.append(lease_prefix);
                id += std::to_string(request_number);
            }
            out.slots.push_back({request_checks[i].key, id, l.lease});
            live_slots_.emplace(live_name(request_checks[i].key, id), out.slots.back());
        }
    }
    if (!live_slots_.empty()) {
        schedule_renewal();
    }
}

std::string redis_store::live_name(std::string_view key, std::string_view lease_id) {
    std::string name;
    name.reserve(key.size() + 1 + lease_id.size());
    name.append(key);
    name.push_back('\0'); // never in a key: header values cannot hold it
    name.append(lease_id);
    return name;
}

std::size_t redis_store::wake_waiters(slot_waiters& waiters, std::string_view announcement) {
    const auto colon = announcement.find(':');
    if (colon == 0 || colon == std::string_view::npos || colon > 9) {
        return 0;
    }
    std::size_t count = 0;
    for (const char c : announcement.substr(0, colon)) {
        if (c < '0' || c > '9') {
            return 0;
        }
        count = count * 10 + static_cast<std::size_t>(c - '0');
    }
    const auto key = announcement.substr(colon + 1);
    std::size_t reached = 0;
    for (std::size_t i = 0; i < std::min(count, max_batch) && waiters.notify(key); ++i) {
        ++reached;
    }
    return reached;
}

std::string redis_store::slot_channel(const config::redis_settings& settings) {
    // Channels are shared by every database of a server: the number keeps them apart.
    return "sluice:slot-freed:" + std::to_string(settings.db);
}

void redis_store::run_script(std::uint16_t slot,
                             const redis::script& script,
                             std::vector<std::string> args,
                             const char* what,
                             const char* otherwise) {
    run_script(slot, script, first_call(script), std::move(args), what, otherwise);
}

void redis_store::run_script(std::uint16_t slot,
                             const redis::script& script,
                             redis::script_call how,
                             std::vector<std::string> args,
                             const char* what,
                             const char* otherwise) {
    std::string command;
    redis::command_writer w(command, 2 + args.size());
    const auto [verb, name] = redis::script_call_head(how, script);
    w.arg(verb);
    w.arg(name);
    for (const auto& a : args) {
        w.arg(std::string_view(a));
    }
    call(slot,
         command,
         [alive = std::weak_ptr(self_), slot, s = &script, how, args, what, otherwise](
             error_code ec, redis::reply r) mutable {
             const auto self = alive.lock();
             if (!self || !ec) {
                 return;
             }
             if (const auto next = (*self)->retry_as(slot, how, r)) {
                 // Redis does not know the script by this name: the same call, named the next
                 // way.
                 (*self)->run_script(slot, *s, *next, std::move(args), what, otherwise);
                 return;
             }
             // Per script and kind of failure (an error reply's kind, as in answer()): a key per
             // text would let each new text through.
             static keyed_log_throttle failures{std::chrono::seconds(10)};
             const auto kind = ec == errc::bad_reply ? r.error_kind() : "unanswered";
             log_throttled_by(failures,
                              std::string(what) + ": " + std::string(kind),
                              spdlog::level::warn,
                              "redis store: could not {} ({}): {}",
                              what,
                              ec == errc::bad_reply ? log_excerpt(r.str) : ec.message(),
                              otherwise);
         });
}

void redis_store::post_flush(bool& posted, void (redis_store::*flush_pending)()) {
    if (posted) {
        return;
    }
    // What is handed over in one turn of the event loop goes in one script call, as the
    // requests decided in one turn do: a burst of responses ending together costs Redis one
    // call, not one per response.
    posted = true;
    net::post(ex_, [alive = std::weak_ptr(self_), flush_pending] {
        if (const auto self = alive.lock()) {
            ((*self)->*flush_pending)();
        }
    });
}

void redis_store::release(std::span<const slot> taken) noexcept {
    // Slots without a lease id came from the local fallback (failure-mode local).
    boost::container::small_vector<slot, 1> local;
    for (const auto& s : taken) {
        if (s.lease_id.empty()) {
            local.push_back(s);
            continue;
        }
        live_slots_.erase(live_name(s.key, s.lease_id));
        releasing_.emplace_back(s.key, s.lease_id);
    }
    if (!local.empty() && local_fallback_ != nullptr) {
        local_fallback_->release(local);
    }
    if (!releasing_.empty()) {
        post_flush(release_posted_, &redis_store::flush_releases);
    }
}

void redis_store::settle(std::span<const settlement> adjustments) noexcept {
    // A reservation the local fallback decided is settled there: Redis never charged it.
    boost::container::small_vector<settlement, 1> local;
    for (const auto& a : adjustments) {
        if (a.local) {
            local.push_back(a);
            continue;
        }
        if (a.limit == nullptr || a.delta == 0 || !limiter::settles(a.limit->algo)) {
            continue; // nothing to adjust
        }
        // What the script needs of the limit, copied: the caller's config snapshot may be gone
        // by the flush.
        auto [p1, p2] = parameters(*a.limit);
        settling_.push_back({a.key,
                             algorithm_code(a.limit->algo),
                             std::move(p1),
                             std::move(p2),
                             limiter::clamp_delta(a.delta),
                             std::nullopt});
    }
    if (!local.empty() && local_fallback_ != nullptr) {
        local_fallback_->settle(local);
    }
    if (!settling_.empty()) {
        post_flush(settle_posted_, &redis_store::flush_settlements);
    }
}

void redis_store::give_back(std::span<const give_back_entry> charges) noexcept {
    for (const auto& g : charges) {
        if (g.limit == nullptr || g.limit->algo == config::algorithm::concurrency) {
            continue; // a slot goes back by `release`
        }
        // Copied, as a settlement's limit is: the caller's config snapshot may be gone by the
        // flush.
        auto [p1, p2] = parameters(*g.limit);
        settling_.push_back({g.key,
                             algorithm_code(g.limit->algo),
                             std::move(p1),
                             std::move(p2),
                             limiter::clamp_cost(g.amount),
                             g.token});
    }
    if (!settling_.empty()) {
        post_flush(settle_posted_, &redis_store::flush_settlements);
    }
}

void redis_store::flush_settlements() {
    settle_posted_ = false;
    const auto slot_of_item = [this](const pending_settlement& a) {
        return slot_of(a.key);
    };
    if (cluster_ != nullptr) {
        group_by_slot(settling_, slot_of_item);
    }
    while (!settling_.empty()) {
        // Bounded, as acquisitions are (max_batch), so that one call keeps Redis busy briefly.
        const auto n = leading_run(settling_, slot_of_item, max_batch);
        const auto slot = slot_of_item(settling_.front());
        // Each distinct key and limit once, as in a batch of requests (see batch::format).
        std::vector<std::size_t> key_of(n);
        std::vector<std::size_t> definition_of(n);
        std::vector<std::size_t> keys;        // the first settlement of each distinct key
        std::vector<std::size_t> definitions; // the first settlement of each distinct limit
        for (std::size_t i = 0; i < n; ++i) {
            const auto& a = settling_[i];
            std::size_t k = 0;
            while (k < keys.size() && settling_[keys[k]].key != a.key) {
                ++k;
            }
            if (k == keys.size()) {
                keys.push_back(i);
            }
            std::size_t d = 0;
            while (d < definitions.size() && !settling_[definitions[d]].same_limit(a)) {
                ++d;
            }
            if (d == definitions.size()) {
                definitions.push_back(i);
            }
            key_of[i] = k + 1;
            definition_of[i] = d + 1;
        }
        std::vector<std::string> args{std::to_string(keys.size())};
        args.reserve(1 + keys.size() + 3 + definition_size * definitions.size() + 2);
        for (const auto k : keys) {
            args.push_back(settling_[k].key);
        }
        args.push_back(now_override_ ? format_double(*now_override_) : std::string());
        args.push_back(std::to_string(ttl_.count()));
        args.push_back(std::to_string(definitions.size()));
        for (const auto d : definitions) {
            // Shaping, max_delay and dry_run play no part in a settlement or a give-back.
            const auto& a = settling_[d];
            args.insert(args.end(), {std::to_string(a.algorithm), a.p1, a.p2, "1", "-1", "0"});
        }
        // A group per run of settlements or of give-backs, in the order they came.
        std::string packed;
        packed.reserve(n * (4 + entry_bytes(true) + token_bytes));
        bool give_backs = false;
        for (std::size_t i = 0; i < n;) {
            const bool run_gives_back = settling_[i].token.has_value();
            give_backs = give_backs || run_gives_back;
            std::size_t end = i;
            while (end < n && settling_[end].token.has_value() == run_gives_back) {
                ++end;
            }
            append_u32(packed, (run_gives_back ? give_backs_group : settlements_group) | (end - i));
            for (; i < end; ++i) {
                append_entry(packed, key_of[i], definition_of[i], true, settling_[i].delta);
                if (run_gives_back) {
                    append_token(packed, *settling_[i].token);
                }
            }
        }
        args.push_back(std::move(packed));
        args.emplace_back(); // the lease prefix: settlements and give-backs take no slot
        settling_.erase(settling_.begin(), settling_.begin() + static_cast<std::ptrdiff_t>(n));
        run_script(slot,
                   redis::limits_script,
                   std::move(args),
                   give_backs ? "settle cost reservations or give back charges"
                              : "settle cost reservations",
                   give_backs ? "the adjustments are dropped, the charges lapse"
                              : "the adjustments are dropped");
    }
}

void redis_store::stop() {
    flush_releases();
    flush_settlements();
    stopped_ = true;
    renew_timer_.cancel();
    if (cluster_ != nullptr) {
        cluster_->stop();
    } else {
        client_->stop();
    }
}

void redis_store::flush_releases() {
    release_posted_ = false;
    const auto slot_of_item = [this](const std::pair<std::string, std::string>& r) {
        return slot_of(r.first);
    };
    if (cluster_ != nullptr) {
        group_by_slot(releasing_, slot_of_item);
    }
    while (!releasing_.empty()) {
        // Bounded, as acquisitions are (max_batch), so that one call keeps Redis busy briefly.
        const auto n = leading_run(releasing_, slot_of_item, max_batch);
        const auto slot = slot_of_item(releasing_.front());
        std::vector<std::string> args{std::to_string(n)};
        args.reserve(3 + 2 * n);
        for (std::size_t i = 0; i < n; ++i) {
            args.push_back(releasing_[i].first);
        }
        args.emplace_back("release");
        args.push_back(channel_);
        for (std::size_t i = 0; i < n; ++i) {
            args.push_back(std::move(releasing_[i].second));
        }
        releasing_.erase(releasing_.begin(), releasing_.begin() + static_cast<std::ptrdiff_t>(n));
        // The slot lapses with its lease instead: limits stay safe, a waiter may wait longer.
        run_script(slot,
                   redis::slots_script,
                   std::move(args),
                   "give back concurrency slots",
                   "they lapse with their lease");
    }
}

void redis_store::schedule_renewal() {
    if (renewing_ || stopped_) {
        return;
    }
    // Every slot is renewed each third of the shortest lease held: a renewal may be lost or
    // late once without the lease lapsing.
    auto shortest = std::chrono::milliseconds::max();
    for (const auto& [name, s] : live_slots_) {
        shortest = std::min(shortest, s.lease);
    }
    renewing_ = true;
    renew_timer_.expires_after(std::max(shortest / 3, std::chrono::milliseconds{1}));
    renew_timer_.async_wait([alive = std::weak_ptr(self_)](error_code ec) {
        const auto self = alive.lock();
        if (!self || ec) {
            return;
        }
        auto& owner = **self;
        owner.renewing_ = false;
        owner.renew_all();
        if (!owner.live_slots_.empty()) {
            owner.schedule_renewal();
        }
    });
}

void redis_store::renew_all() {
    // In calls of at most max_batch slots, as everything else sent: a worker holding thousands
    // of slots must not make one call that keeps Redis busy for long.
    std::vector<const slot*> held;
    held.reserve(live_slots_.size());
    for (const auto& [name, s] : live_slots_) {
        held.push_back(&s);
    }
    const auto slot_of_item = [this](const slot* s) {
        return slot_of(s->key);
    };
    if (cluster_ != nullptr) {
        group_by_slot(held, slot_of_item);
    }
    std::size_t next = 0;
    while (next < held.size()) {
        const auto cluster_slot = slot_of_item(held[next]);
        std::vector<std::pair<std::string_view, const slot*>> part;
        for (; next < held.size() && part.size() < max_batch &&
               slot_of_item(held[next]) == cluster_slot;
             ++next) {
            part.emplace_back(held[next]->key, held[next]);
        }
        std::vector<std::string> args{std::to_string(part.size())};
        args.reserve(3 + 3 * part.size());
        for (const auto& [key, s] : part) {
            args.emplace_back(key);
        }
        args.emplace_back("renew");
        args.push_back(now_override_ ? format_double(*now_override_) : std::string());
        for (const auto& [key, s] : part) {
            args.push_back(s->lease_id);
            args.push_back(std::to_string(s->lease.count()));
        }
        run_script(cluster_slot,
                   redis::slots_script,
                   std::move(args),
                   "renew concurrency slots",
                   "they lapse with their lease");
    }
}

void redis_store::apply_reloadable(const config::redis_settings& settings) noexcept {
    ttl_ = settings.ttl;
    on_failure_ = settings.on_failure;
}

outcome redis_store::fail(const checks& request_checks, error_code ec) {
    if (metrics_ != nullptr) {
        metrics::bump(metrics_->store_errors_total);
    }
    if (on_failure_ == config::failure_mode::local && local_fallback_ != nullptr) {
        auto out = local_fallback_->acquire_now(request_checks);
        out.local = true;
        return out;
    }
    return undecided(ec);
}

std::unique_ptr<store> make_redis_store(executor ex,
                                        const config::redis_settings& settings,
                                        memory_store* local_fallback) {
    return std::make_unique<redis_store>(std::move(ex), settings, local_fallback);
}

} // namespace sluice::store
