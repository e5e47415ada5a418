// SPDX-License-Identifier: Apache-2.0
#pragma once

// The arguments and the reply of one call of src/redis/limits.lua, whose header defines both:
// pure encoding and decoding, no I/O. The Redis store (redis_store.cpp) batches requests and
// sends them; this is what it writes and what it reads back.

#include "sluice/config/config.hpp"
#include "sluice/limiter/cost.hpp"
#include "sluice/redis/command_writer.hpp"
#include "sluice/redis/reply.hpp"
#include "sluice/store/redis_store.hpp"
#include "sluice/store/store.hpp"

#include <boost/container/small_vector.hpp>
#include <boost/endian/conversion.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sluice::store::limits_call {

// The arguments of one limit definition.
inline constexpr std::size_t definition_size = 6;

// The script's reply per key: allowed, remaining, reset_ms, retry_after_ms, delay_ms, level,
// each a signed 64-bit little-endian integer; a tentative request's keys add their give-back
// token, t1 and t2.
inline constexpr std::size_t reply_fields = 6;
inline constexpr std::size_t token_fields = 2;
inline constexpr std::size_t field_bytes = 8;

// The packed groups' flags.
inline constexpr std::uint64_t amount_follows = std::uint64_t{1} << 31;
inline constexpr std::uint64_t negative_amount = std::uint64_t{1} << 30;
inline constexpr std::uint64_t tentative_group = std::uint64_t{1} << 30;
inline constexpr std::uint64_t settlements_group = std::uint64_t{1} << 31;
inline constexpr std::uint64_t give_backs_group = settlements_group | tentative_group;

// A give-back token's bytes in the packed groups: t1 and t2, 64 bits each.
inline constexpr std::size_t token_bytes = token_fields * field_bytes;

/// The script's number for an algorithm (a definition's first field).
int algorithm_code(config::algorithm a) noexcept;

/**
 * The shortest text that reads back as exactly `x` (std::to_chars guarantees the round trip),
 * which Lua's tonumber (strtod) reads as the script needs. snprintf's "%.17g" printed the same
 * value at eight times the cost: 2.6k instructions a limit definition in every batch, where
 * this takes 0.3k (callgrind, bench's Redis case).
 */
std::string format_double(double x);

/// The two numeric parameters of a limit's definition: {capacity, rate per s} for the buckets,
/// {limit, window in ms} for the windows, {limit, lease in ms} for CONCURRENCY.
std::pair<std::string, std::string> parameters(const config::limit& l);

/// Writes a limit's definition: algorithm, p1, p2, mode, max_delay, dry_run.
void write_definition(redis::command_writer& w, const config::limit& l);

/**
 * Each limit's definition in a batch's script call (write_definition's arguments, in RESP),
 * written once and spliced into every call that names the limit: writing it, its rate printed
 * as the shortest double, cost some 1.5k instructions per limit and batch. Found by the limit's
 * address, and used only while the limit still says what it said when written: a reload frees
 * the old limits, and a new one may take an old one's address.
 */
class definition_texts {
public:
    std::string_view of(const config::limit& l);

private:
    // What write_definition reads of a limit.
    struct limit_fields {
        explicit limit_fields(const config::limit& l);

        bool operator==(const limit_fields&) const = default;

        config::algorithm algo;
        std::int64_t capacity;
        std::int64_t limit_count;
        double flow_rate;
        double refill_rate;
        std::chrono::milliseconds window;
        std::chrono::milliseconds lease;
        config::shaping_mode mode;
        std::optional<std::chrono::milliseconds> max_delay;
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

/// Fills a request batch's packed argument in the space the command writer made for it
/// (redis::command_writer::space): plain stores, rather than an append into the command for each
/// of a request's three numbers.
struct packed_cursor {
    char* at;

    void append(std::string_view bytes) noexcept { at = std::copy(bytes.begin(), bytes.end(), at); }
};

/// Appends `v` as the script's packed numbers are: 32 bits, little-endian. `Out` is a
/// packed_cursor or an argument built apart (std::string).
template <typename Out>
void append_u32(Out& out, std::uint64_t v) {
    const char bytes[4] = {static_cast<char>(v & 0xff),
                           static_cast<char>((v >> 8) & 0xff),
                           static_cast<char>((v >> 16) & 0xff),
                           static_cast<char>((v >> 24) & 0xff)};
    out.append(std::string_view(bytes, sizeof bytes));
}

/// The bytes of one entry of the packed groups: a request's key of cost 1 costs no amount.
constexpr std::size_t entry_bytes(bool with_amount) noexcept {
    return with_amount ? 16 : 8;
}

/// Appends one entry: the key's and the definition's numbers, and `amount` when `with_amount`
/// (|amount| <= 2^53: limiter::clamp_cost and clamp_delta bound it).
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

/// Appends a give-back token: t1 and t2, each as 64 bits (two's complement) in two numbers.
template <typename Out>
void append_token(Out& out, const give_back_token& token) {
    for (const std::int64_t t : {token.t1, token.t2}) {
        const auto bits = static_cast<std::uint64_t>(t);
        append_u32(out, bits & 0xffffffff);
        append_u32(out, bits >> 32);
    }
}

/**
 * Writes into `command` the script call deciding `requests`, with `verb` and `script` its first
 * two arguments (`redis::script_call_head`): the batch's distinct keys, its distinct limits,
 * then its requests packed into one argument, each as its number of keys and, per key, the
 * key's and the limit's numbers; last `lease_prefix`. Returns the reply's size in bytes:
 * `reply_fields` per check of every request (KEYS holds each key once, the reply each check),
 * and `token_fields` more per check of a tentative request. `Requests` is a range of the
 * batch's waiters, each with `request_checks` (a `const checks*`) and `give_backs` (set for a
 * tentative request). Two passes in one function (number the keys and limits, then write),
 * since the second reads what the first counted.
 */
template <typename Requests>
std::size_t write_decide_call(std::string& command,
                              std::string_view verb,
                              std::string_view script,
                              const Requests& requests,
                              std::optional<double> now,
                              std::chrono::milliseconds ttl,
                              definition_texts& texts,
                              std::string_view lease_prefix) {
    // A burst from one client repeats one key: each distinct key and limit goes once.
    boost::container::small_vector<const config::limit*, 8> definitions;
    boost::container::small_vector<std::string_view, 16> keys;
    boost::container::small_vector<std::size_t, 16> key_hashes;
    boost::container::small_vector<std::pair<std::uint32_t, std::uint32_t>, 64> numbers;
    std::size_t packed_bytes = 0;
    std::size_t reply_size = 0;
    for (const auto& r : requests) {
        reply_size += r.request_checks->size() * field_bytes *
                      (r.give_backs ? reply_fields + token_fields : reply_fields);
        for (const auto& c : *r.request_checks) {
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
    // Room for all of it at once, where growing by doubling copied the command six times over
    // in a batch of 26 requests. At most 26 bytes of framing per argument ("$", 20 digits, two
    // CRLFs) and 24 of text per number (a definition's, `now`, the ttl).
    command.clear();
    command.reserve(16 + argc * (26 + 24) + verb.size() + script.size() + key_bytes +
                    4 * std::size(requests) + packed_bytes + lease_prefix.size());
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
    const std::size_t packed_size = 4 * std::size(requests) + packed_bytes;
    w.begin_arg(packed_size);
    packed_cursor packed{w.space(packed_size)};
    std::size_t next = 0;
    for (const auto& r : requests) {
        const auto& request_checks = *r.request_checks;
        append_u32(packed, (r.give_backs ? tentative_group : 0) | request_checks.size());
        for (std::size_t i = 0; i < request_checks.size(); ++i, ++next) {
            const auto cost = limiter::clamp_cost(request_checks[i].cost);
            append_entry(packed, numbers[next].first, numbers[next].second, cost != 1, cost);
        }
    }
    w.end_arg();
    w.arg(lease_prefix);
    return reply_size;
}

/// Whether the script's reply is packed fields of `bytes` bytes in all.
inline bool well_formed(const redis::reply& r, std::size_t bytes) {
    return r.type == redis::reply::kind::string && r.str.size() == bytes;
}

/// Field `i` of the packed reply (little-endian, whatever the host's order). One load where
/// the host is little-endian: assembled byte by byte, the five fields of a decision cost 110
/// instructions a request.
inline std::int64_t field_at(std::string_view packed, std::size_t i) noexcept {
    static_assert(field_bytes == sizeof(std::int64_t));
    return boost::endian::load_little_s64(
        reinterpret_cast<const unsigned char*>(packed.data() + i * field_bytes));
}

/**
 * A duration field (reset, retry-after): the script packs one past the largest double below
 * 2^63 as that double (limits.lua's `saturated`, where struct.pack would wrap), read back here
 * as the int64 maximum, which is what the memory store's saturating conversion gives.
 */
inline std::chrono::milliseconds duration_at(std::string_view packed, std::size_t i) noexcept {
    constexpr std::int64_t script_ceiling = 9'223'372'036'854'774'784; // 2^63 - 1024
    const auto ms = field_at(packed, i);
    return std::chrono::milliseconds{ms >= script_ceiling ? std::numeric_limits<std::int64_t>::max()
                                                          : ms};
}

/**
 * The longest delay the script can give `l`: none unless it shapes (only a LEAKY_BUCKET in
 * shape mode delays); then its max-delay, or else the whole bucket's drain time, since a
 * request admitted with room waits for fewer than `capacity` slots to leak (limits.lua's
 * leak_and_admit, as src/limiter/leaky_bucket.cpp's). With one slot and a millisecond to
 * spare: the bound is there to refuse absurd figures, and a reply that rounded otherwise than
 * this does must never be taken for one.
 */
std::chrono::milliseconds delay_bound(const config::limit& l) noexcept;

/**
 * Whether every delay in one request's reply (its fields from `field` on, `stride` per key) is
 * within [0, delay_bound] of its limit. Redis's reply is input like any other: a delay beyond it
 * would overflow the hold's end (now + delay) or hold a request for years. One that breaks the
 * bound says the script, or the state it read, is not what this store wrote, so that request is
 * treated as the malformed reply it is, bad_reply and the failure mode, rather than clamped into
 * a decision taken from a state we have reason to doubt. The batch's other requests, decided on
 * their own state, stand.
 */
bool delays_within_bounds(std::string_view packed,
                          std::size_t field,
                          const checks& request_checks,
                          std::size_t stride) noexcept;

/// Writes into `out` the decisions of one request, from the reply's fields starting at `field`,
/// `stride` per key.
void decisions_at(std::string_view packed,
                  std::size_t field,
                  const checks& request_checks,
                  std::size_t stride,
                  outcome& out);

/// Whether the script charged the request: every limit that is not dry-run admitted it.
bool admitted(const checks& request_checks, const outcome& out) noexcept;

/**
 * What giving back a tentative request's charges takes, from its keys' tokens (each key's
 * fields start at `field`, `stride` apart): a limit is charged when the request is, it
 * admitted, and it is the last of the request's checks on its key (phase 2 of the script writes
 * only that one). CONCURRENCY slots are not entries: they are the outcome's `slots`.
 */
std::vector<give_back_entry> give_backs_at(std::string_view packed,
                                           std::size_t field,
                                           const checks& request_checks,
                                           const outcome& out,
                                           std::size_t stride);

} // namespace sluice::store::limits_call
