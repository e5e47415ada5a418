// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"

#include <boost/container/small_vector.hpp>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace sluice::key {

/**
 * The page's key, "rate-limit:<client>:<endpoint>", e.g. "rate-limit:203.0.113.7:/v1/infer".
 * `client` comes from client_key_part(), `endpoint` from normalize_path() (or a rule's pattern);
 * a part longer than max_key_part is shortened as limit_key() says. One allocation.
 */
std::string make_key(std::string_view client, std::string_view endpoint);

class header_lookup;

/// A callable that can stand behind a header_lookup (and is not one itself).
template <typename F>
concept header_finder =
    !std::is_same_v<std::remove_cvref_t<F>, header_lookup> &&
    std::is_invocable_r_v<std::optional<std::string_view>, F&, std::string_view>;

/**
 * A non-owning reference to a callable `std::optional<std::string_view>(std::string_view name)`
 * that finds a request header by name (case-insensitively, as HTTP does: that is the callable's
 * job). Like a function_ref: it must not outlive the callable, so pass it straight into a call.
 * A default-constructed lookup finds nothing.
 */
class header_lookup {
public:
    header_lookup() noexcept = default;

    template <header_finder F>
    header_lookup(F&& f) noexcept
        : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f))))
        , call_(&invoke<std::remove_reference_t<F>>) {}

    std::optional<std::string_view> operator()(std::string_view name) const {
        return call_ ? call_(object_, name) : std::nullopt;
    }

private:
    template <typename F>
    static std::optional<std::string_view> invoke(void* object, std::string_view name) {
        return (*static_cast<F*>(object))(name);
    }

    void* object_ = nullptr;
    std::optional<std::string_view> (*call_)(void*, std::string_view) = nullptr;
};

/// How a rule's path pattern matches, from its spelling, as config.hpp defines it: no '*' →
/// exact; one '*', at the very end → prefix; any other use of '*' → glob. (src/config's loader
/// classifies the same way.)
config::rule::match_kind classify_pattern(std::string_view pattern) noexcept;

/// The first rule, in order, whose methods and path pattern match the request; nullptr if none
/// (the caller then applies the fallback limit).
///
/// - methods: empty matches any method, otherwise one must equal `method` exactly (case matters,
///   as RFC 9110 says for method names).
/// - exact: the normalized path equals the pattern.
/// - prefix: the path begins with the pattern without its final '*'. So "/v1/models/*" matches
///   "/v1/models/1", "/v1/models/a/b" and "/v1/models/", but NOT "/v1/models" (make a second,
///   exact rule for it); "/v1*" matches "/v1", "/v1/x" and "/v1beta".
/// - glob: '*' matches any run, possibly empty, of characters other than '/', so the path has as
///   many segments as the pattern ("/v1/*/infer" matches "/v1/a/infer", not "/v1/a/b/infer";
///   "/files/*.json" matches "/files/a.json", not "/files/d/a.json"). Every other character
///   matches itself.
///
/// `rule.kind` decides (a prefix rule whose pattern is not one trailing '*' is matched as a
/// glob). `normalized_path` is normalize_path()'s output. Cost: no allocation, O(path × pattern)
/// at worst for a glob.
const config::rule* match_rule(std::span<const config::rule> rules,
                               std::string_view method,
                               std::string_view normalized_path) noexcept;

/**
 * The key of one limit: "rate-limit:" then one part per entry of `limit.key`, in order, joined
 * by ':'.
 *
 * - ip: `client_part` (client_key_part()'s output);
 * - endpoint: `endpoint`: the caller passes the matched rule's pattern for a prefix or glob rule
 *   (one bucket for the whole pattern) and the normalized path otherwise;
 * - header: "h=<value>" of the named header; when the header is missing or empty, the client
 *   part instead, so that leaving the header out does not escape the limit;
 * - global: "*";
 * - json: "j=<value>" of the request body's field at the part's path, as `json_fields` finds it
 *   by the path's text (a string unescaped, a number as written); when it is missing or holds
 *   a control character, the client part instead.
 *
 * A part (its text, after "h=" or "j=") longer than max_key_part bytes is written as its first
 * 240 bytes, '~' and 16 hex digits of a 64-bit FNV-1a digest of the whole: 257 bytes. So a key
 * stays short however long the path or header a client sends, and distinct values keep
 * distinct keys (but for a 2^-64 chance), the same on every instance.
 *
 * The default key [ip, endpoint] gives exactly make_key(client_part, endpoint). An empty key
 * list gives "rate-limit:*" (one bucket). Cost: one allocation, sized up front; each header is
 * looked up once (up to 8 parts).
 */
std::string limit_key(const config::limit& limit,
                      std::string_view client_part,
                      std::string_view endpoint,
                      header_lookup headers,
                      header_lookup json_fields = {});

/// The longest key part written whole (a path, an API key, a model name); see limit_key().
inline constexpr std::size_t max_key_part = 256;

/// One store key per limit of the rule that decides a request, in the limits' order.
using limit_keys = boost::container::small_vector<std::string, 2>;

/**
 * The store keys of a request's limits: `rule` is match_rule()'s answer (nullptr: the fallback,
 * whose one limit is `limits`), `rule_name` its name ("fallback" for the fallback),
 * `normalized_path` normalize_path()'s output.
 *
 * Each key is limit_key()'s, with the endpoint the rule's pattern for a prefix or glob rule (one
 * bucket for the whole pattern) and the path otherwise. The first [ip, endpoint] limit owns the
 * page's own key, "rate-limit:<ip>:<endpoint>", unless it belongs to a method-filtered rule
 * (which shares its path with the fallback or another rule serving the other methods). Every
 * other key is scoped by rule and position, "rate-limit:<rule>#<index>:<parts>", so that two
 * limits never share state by accident (a second [ip, endpoint] limit, an [ip] or [global] limit
 * of two rules ...).
 */
limit_keys request_limit_keys(const config::rule* rule,
                              std::span<const config::limit> limits,
                              std::string_view rule_name,
                              std::string_view client_part,
                              std::string_view normalized_path,
                              header_lookup headers,
                              header_lookup json_fields = {});

} // namespace sluice::key
