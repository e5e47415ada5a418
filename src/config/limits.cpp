// SPDX-License-Identifier: Apache-2.0
// Reading one limit of the configuration (the fallback, or one of a rule's): its algorithm and
// parameters, each checked against what the algorithm takes and what the Lua script can count
// exactly; its key, cost, lease and options. Every problem is reported with its key and line.
#include "loader_detail.hpp"
#include "sluice/core/saturate.hpp"
#include "sluice/core/text.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

namespace sluice::config::detail {
namespace {

// Counts stay exact in the Lua script, whose numbers are doubles.
constexpr std::int64_t max_count = std::int64_t{1} << 53;

constexpr std::array<std::string_view, 5> all_parameters{
    "capacity", "flowRate", "refillRate", "limit", "window"};

std::vector<std::string_view> parameters_of(algorithm algo) {
    switch (algo) {
    case algorithm::leaky_bucket:
        return {"capacity", "flowRate"};
    case algorithm::token_bucket:
        return {"capacity", "refillRate"};
    case algorithm::fixed_window:
    case algorithm::sliding_window:
        return {"limit", "window"};
    case algorithm::concurrency:
        return {"limit"};
    }
    return {};
}

std::string join(const std::vector<std::string_view>& words) {
    std::string out;
    for (const auto word : words) {
        out += (out.empty() ? "" : ", ") + std::string(word);
    }
    return out;
}

/// Reads one parameter that `algo` takes; true when it was valid.
bool read_parameter(mapping& m, std::string_view name, limit& out) {
    if (name == "capacity") {
        return m.read_int("capacity", out.capacity, 1, max_count);
    }
    if (name == "flowRate") {
        return m.read_rate("flowRate", out.flow_rate);
    }
    if (name == "refillRate") {
        return m.read_rate("refillRate", out.refill_rate);
    }
    if (name == "limit") {
        return m.read_int("limit", out.limit_count, 1, max_count);
    }
    if (name == "window") {
        return m.read_duration("window", out.window, false);
    }
    return false;
}

/// `value` rounded up to three significant digits, in the plain decimal form the loader reads
/// back (no exponent): 1.5625e-08 gives "0.0000000157".
std::string round_up_plain(double value) {
    const int digits = std::max(0, 2 - saturating_cast<int>(std::floor(std::log10(value))));
    const double scale = std::pow(10.0, digits);
    char buffer[64];
    const int n =
        std::snprintf(buffer, sizeof buffer, "%.*f", digits, std::ceil(value * scale) / scale);
    return std::string(buffer, static_cast<std::size_t>(std::clamp(n, 0, 63)));
}

/**
 * A bucket's full drain (capacity slots of 1000 / rate ms each) must be a duration the stores can
 * count: beyond about a century the millisecond arithmetic leaves the range of a 64-bit integer
 * and a double's whole numbers, and a limit would silently stop limiting. Reports the smallest
 * rate accepted with this capacity.
 */
void check_drain(mapping& m, std::string_view rate_name, const limit& out, double rate) {
    if (static_cast<double>(out.capacity) * (1000.0 / rate) <= max_duration_ms) {
        return;
    }
    const double smallest = static_cast<double>(out.capacity) * 1000.0 / max_duration_ms;
    m.error(rate_name,
            "must be at least " + round_up_plain(smallest) + " with capacity " +
                std::to_string(out.capacity) +
                " (a full bucket must drain within about a century), got " +
                describe(m.get(rate_name)));
}

/**
 * Exactly the parameters the algorithm takes: a missing one is an error, and so is one that
 * belongs to another algorithm, since it would be silently ignored (e.g. `refillRate` on a leaky
 * bucket, where the operator meant to tune the drain).
 */
void read_parameters(mapping& m, limit& out, const std::string& algo_name, bool algo_known) {
    const auto wanted = parameters_of(out.algo);
    std::size_t valid = 0;
    for (const auto name : all_parameters) {
        if (!algo_known) {
            m.has(name); // known key; which ones belong is unknowable
            continue;
        }
        const bool belongs = std::find(wanted.begin(), wanted.end(), name) != wanted.end();
        if (!belongs) {
            if (m.has(name)) {
                m.error(name, "does not apply to " + algo_name + ", which takes " + join(wanted));
            }
        } else if (!m.has(name)) {
            m.require(name, algo_name + " takes " + join(wanted));
        } else if (read_parameter(m, name, out)) {
            ++valid;
        }
    }
    if (!algo_known || valid != wanted.size()) {
        return;
    }
    if (out.algo == algorithm::leaky_bucket) {
        check_drain(m, "flowRate", out, out.flow_rate);
    } else if (out.algo == algorithm::token_bucket) {
        check_drain(m, "refillRate", out, out.refill_rate);
    }
}

/// What is wrong with a `json:PATH` whose PATH parse_json_path refused (`node`).
std::string json_path_error(const YAML::Node& node) {
    return "must name a dotted path into a JSON body after 'json:' (such as "
           "json:usage.total_tokens: no empty segment, at most " +
           std::to_string(max_json_path_segments) + " segments), got " + describe(node);
}

std::optional<key_part>
parse_key_part(problems& report, const list_item& part, const std::string& path) {
    const auto& item = part.node;
    static const std::vector<std::string> words{"ip", "endpoint", "global"};
    const std::string expected = "ip, endpoint, global, header:NAME or json:PATH";
    if (!item.IsScalar()) {
        report.add(part.mark, path, must_be(expected, item));
        return std::nullopt;
    }
    const auto& text = item.Scalar();
    if (text.rfind("header:", 0) == 0) {
        const auto name = text.substr(7);
        if (!is_token(name)) {
            report.add(
                part.mark, path, "must name an HTTP header after 'header:', got " + describe(item));
            return std::nullopt;
        }
        return key_part{key_part::kind::header, name, {}};
    }
    if (text.rfind("json:", 0) == 0) {
        auto json = parse_json_path(std::string_view(text).substr(5));
        if (!json) {
            report.add(part.mark, path, json_path_error(item));
            return std::nullopt;
        }
        return key_part{key_part::kind::json, {}, std::move(*json)};
    }
    if (text == "ip") {
        return key_part{key_part::kind::ip, {}, {}};
    }
    if (text == "endpoint") {
        return key_part{key_part::kind::endpoint, {}, {}};
    }
    if (text == "global") {
        return key_part{key_part::kind::global, {}, {}};
    }
    auto what = must_be(expected, item);
    if (const auto near = closest(text, words); !near.empty()) {
        what += "; did you mean " + quoted(near) + "?";
    }
    report.add(part.mark, path, what);
    return std::nullopt;
}

bool same_part(const key_part& a, const key_part& b) {
    if (a.what != b.what) {
        return false;
    }
    if (a.what == key_part::kind::json) {
        return a.json.text == b.json.text; // JSON member names are case-sensitive
    }
    return std::equal(
        a.header.begin(), a.header.end(), b.header.begin(), b.header.end(), [](char x, char y) {
            return std::tolower(static_cast<unsigned char>(x)) ==
                   std::tolower(static_cast<unsigned char>(y));
        });
}

void read_key(mapping& m, limit& out) {
    if (!m.has("key")) {
        return;
    }
    const auto items = m.read_list("key");
    if (m.get("key").IsSequence() && items.empty()) {
        m.error("key", "must not be empty; [global] makes one limit shared by every client");
        return;
    }
    // Each part is at most 257 bytes in a key (rate_limit_key.hpp): eight keep a key within
    // about 2.2 KB, which the memory store counts in 16 bits (src/store/key_table.hpp).
    constexpr std::size_t max_key_parts = 8;
    if (items.size() > max_key_parts) {
        m.error("key",
                "has " + std::to_string(items.size()) + " parts; at most " +
                    std::to_string(max_key_parts));
        return;
    }
    std::vector<key_part> parts;
    bool ok = !items.empty();
    for (std::size_t i = 0; i < items.size(); ++i) {
        const auto path = m.path_of("key") + "[" + std::to_string(i) + "]";
        const auto part = parse_key_part(m.report(), items[i], path);
        if (!part) {
            ok = false;
            continue;
        }
        const auto same = [&](const key_part& p) {
            return same_part(p, *part);
        };
        if (std::any_of(parts.begin(), parts.end(), same)) {
            m.report().add(items[i].mark, path, "appears twice");
            ok = false;
            continue;
        }
        parts.push_back(*part);
    }
    const auto is_global = [](const key_part& p) {
        return p.what == key_part::kind::global;
    };
    if (parts.size() > 1 && std::any_of(parts.begin(), parts.end(), is_global)) {
        m.error("key", "'global' must be the only part: a global limit is shared by every client");
        ok = false;
    }
    if (ok) {
        out.key = std::move(parts);
    }
}

/// The largest cost a figure may give: what a double holds exactly (limiter/cost.hpp clamps to
/// the same bound).
constexpr std::int64_t max_cost = std::int64_t{1} << 53;

/// The most `cost.max-body` may be: a request body that large is held in memory per request.
constexpr std::uint64_t max_json_body = 64ULL * 1024 * 1024;

/// `cost.request` or `cost.response`: a number (request only), header:NAME or json:PATH.
void read_cost_source(mapping& m, std::string_view name, bool number_allowed, cost_source& out) {
    if (!m.has(name)) {
        return;
    }
    const auto node = m.get(name);
    const std::string expected =
        number_allowed ? "a number, header:NAME or json:PATH" : "header:NAME or json:PATH";
    if (!node.IsScalar()) {
        m.error(name, must_be(expected, node));
        return;
    }
    const auto& text = node.Scalar();
    if (text.rfind("header:", 0) == 0) {
        const auto header = text.substr(7);
        if (!is_token(header)) {
            m.error(name, "must name an HTTP header after 'header:', got " + describe(node));
            return;
        }
        out = {cost_source::kind::header, 0, header, {}};
        return;
    }
    if (text.rfind("json:", 0) == 0) {
        auto json = parse_json_path(std::string_view(text).substr(5));
        if (!json) {
            m.error(name, json_path_error(node));
            return;
        }
        out = {cost_source::kind::json, 0, {}, std::move(*json)};
        return;
    }
    // Something like a number gets the number's message (its range); anything else, the forms.
    if (number_allowed && !text.empty() && text.find_first_of("0123456789+-.") == 0) {
        std::int64_t value = 0;
        if (m.read_int(name, value, 1, max_cost)) {
            out = {cost_source::kind::number, value, {}, {}};
        }
        return;
    }
    m.error(name, must_be(expected, node));
}

/// A limit's `cost` block (issue 15): every algorithm but CONCURRENCY.
void read_cost(mapping& m, limit& out, const std::string& algo_name, bool algo_known) {
    if (!m.has("cost")) {
        return;
    }
    if (algo_known && out.algo == algorithm::concurrency) {
        m.error(
            "cost",
            "applies only to TOKEN_BUCKET, LEAKY_BUCKET, FIXED_WINDOW and SLIDING_WINDOW, not " +
                algo_name + " (a slot is a slot, whatever the request costs)");
        return;
    }
    const auto node = m.get("cost");
    if (!node.IsMap()) {
        m.error("cost", must_be("a mapping such as { request: header:X-Cost, default: 1 }", node));
        return;
    }
    mapping c(m.report(), node, m.mark_of("cost"), m.path_of("cost"));
    cost_block block;
    read_cost_source(c, "request", true, block.request);
    if (c.has("default")) {
        c.read_int("default", block.fallback, 0, max_cost);
    }
    read_cost_source(c, "response", false, block.response);
    if (c.has("on-missing")) {
        if (block.response.what == cost_source::kind::none) {
            c.error("on-missing", "applies only with a response source (cost.response)");
        } else {
            bool refund = false;
            c.read_enum<bool>("on-missing", refund, {{"keep", false}, {"refund", true}});
            block.refund_on_missing = refund;
        }
    }
    if (c.has("max-body")) {
        c.read_size("max-body", block.max_body, 1, max_json_body);
    }
    // Only when it is not written at all: a written one that is invalid has its own message.
    if (block.request.what == cost_source::kind::none && !c.has("request")) {
        c.require("request", "what the request reserves: a number, header:NAME or json:PATH");
    }
    c.finish();
    out.cost = std::move(block);
}

/// A lease shorter than this could lapse between two renewals (every lease / 3) on a slow Redis.
constexpr std::chrono::milliseconds min_lease{1'000};

/// CONCURRENCY's `lease`; an error on any other algorithm.
void read_lease(mapping& m, limit& out, const std::string& algo_name, bool algo_known) {
    if (!m.has("lease")) {
        return;
    }
    if (algo_known && out.algo != algorithm::concurrency) {
        m.error("lease", "applies only to CONCURRENCY, not " + algo_name);
        return;
    }
    std::chrono::milliseconds lease{0};
    if (!m.read_duration("lease", lease, false)) {
        return;
    }
    if (lease < min_lease) {
        m.error("lease",
                "must be at least 1s (a held slot is renewed every lease / 3), got " +
                    describe(m.get("lease")));
        return;
    }
    out.lease = lease;
}

/// mode, max-delay, max-waiting, lease, dry-run and key.
void read_options(mapping& m, limit& out, const std::string& algo_name, bool algo_known) {
    // The algorithms that may make a request wait: for its slot in the queue, or for a free slot.
    const bool leaky = out.algo == algorithm::leaky_bucket || out.algo == algorithm::concurrency;
    if (m.has("mode")) {
        if (algo_known && !leaky) {
            m.error("mode", "applies only to LEAKY_BUCKET and CONCURRENCY, not " + algo_name);
        } else {
            m.read_enum<shaping_mode>(
                "mode",
                out.mode,
                {{"shape", shaping_mode::shape}, {"police", shaping_mode::police}});
        }
    }
    if (m.has("max-delay")) {
        std::chrono::milliseconds delay{0};
        if (algo_known && !leaky) {
            m.error("max-delay", "applies only to LEAKY_BUCKET and CONCURRENCY, not " + algo_name);
        } else if (out.mode == shaping_mode::police) {
            m.error("max-delay", "applies only to mode: shape (police never holds a request)");
        } else if (m.read_duration("max-delay", delay, true)) {
            out.max_delay = delay;
        }
    }
    if (m.has("max-waiting")) {
        std::int64_t waiting = 0;
        if (algo_known && out.algo != algorithm::concurrency) {
            m.error("max-waiting", "applies only to CONCURRENCY, not " + algo_name);
        } else if (out.mode == shaping_mode::police) {
            m.error("max-waiting",
                    "applies only to mode: shape (police never makes a request wait)");
        } else if (m.read_int("max-waiting", waiting, 1, max_count)) {
            out.max_waiting = waiting;
        }
    }
    read_lease(m, out, algo_name, algo_known);
    read_cost(m, out, algo_name, algo_known);
    m.read("dry-run", out.dry_run);
    read_key(m, out);
}

} // namespace

limit parse_limit(problems& report,
                  const YAML::Node& node,
                  const YAML::Mark& at,
                  const std::string& path) {
    limit out;
    out.line = line_of(at);
    if (!node.IsMap()) {
        report.add(at,
                   path,
                   must_be("a mapping such as { algorithm: LEAKY_BUCKET, capacity: 50, "
                           "flowRate: 5 }",
                           node));
        return out;
    }
    mapping m(report, node, at, path);
    std::string algo_name = "LEAKY_BUCKET";
    bool algo_known = true;
    if (m.has("algorithm")) {
        algo_known = m.read_enum<algorithm>("algorithm",
                                            out.algo,
                                            {{"LEAKY_BUCKET", algorithm::leaky_bucket},
                                             {"TOKEN_BUCKET", algorithm::token_bucket},
                                             {"FIXED_WINDOW", algorithm::fixed_window},
                                             {"FIXED_COUNTER", algorithm::fixed_window},
                                             {"SLIDING_WINDOW", algorithm::sliding_window},
                                             {"CONCURRENCY", algorithm::concurrency}});
        if (algo_known) {
            algo_name = m.get("algorithm").Scalar();
        }
    }
    read_parameters(m, out, algo_name, algo_known);
    read_options(m, out, algo_name, algo_known);
    m.finish();
    return out;
}

} // namespace sluice::config::detail
