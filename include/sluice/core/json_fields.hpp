// SPDX-License-Identifier: Apache-2.0
#pragma once

// Finding a few fields in a JSON document a peer sent (a request body, a response body, one
// server-sent event), for cost-weighted limits and `json:` key parts (issue 15). RapidJSON's SAX
// reader does the parsing; this file only follows the paths. No DOM is built: the memory it takes
// is the document's own plus the reader's stack.

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

/// A dotted path into a JSON document: `usage.total_tokens` is {"usage", "total_tokens"}. A
/// segment of digits also names that element of an array (`choices.0.text`).
struct json_path {
    /// As written in the configuration, for messages and for telling paths apart.
    std::string text;
    std::vector<std::string> segments;
};

/// The most segments a path may have; deeper documents are fine, deeper paths are refused.
inline constexpr std::size_t max_json_path_segments = 16;

/**
 * `text` as a path: segments separated by '.', none empty, at most max_json_path_segments; a key
 * that itself contains a '.' cannot be named. nullopt when `text` is no such path.
 */
std::optional<json_path> parse_json_path(std::string_view text);

/// What a document holds at a path.
struct json_scalar {
    enum class kind {
        absent, // the path leads nowhere (or the document is not JSON)
        number, // `text` is the number as written ("1e3", "-5", "12.5")
        string, // `text` is the string, unescaped (valid UTF-8)
        other,  // true, false, null, an object or an array
    };
    kind what = kind::absent;
    std::string text;
};

/**
 * Reads `document`, which must be one complete JSON text (RFC 8259, UTF-8, nothing after it but
 * whitespace), and sets `out[i]` to what it holds at `paths[i]`. When a path occurs more than once
 * (an object with a repeated member), the last occurrence counts, as it does for the JSON readers
 * of Python, JavaScript and Go that the upstream most likely runs: a client repeating
 * `max_tokens` cannot reserve by the first and be served by the second. Returns false, with every
 * `out[i]` absent, when the document is not JSON or is nested deeper than `max_depth`.
 * `out.size()` must equal `paths.size()`. Time: linear in the document; no recursion.
 */
bool find_json_fields(std::string_view document,
                      std::span<const json_path* const> paths,
                      std::span<json_scalar> out);

/// How deep find_json_fields lets a document nest.
inline constexpr std::size_t max_json_depth = 128;

} // namespace sluice
