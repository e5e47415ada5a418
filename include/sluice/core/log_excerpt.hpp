// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace sluice {

/// How much of a text a peer chose a log line shows, unless told otherwise.
inline constexpr std::size_t log_excerpt_bytes = 128;

/**
 * What a log line may show of `text` that a peer chose (a Redis reply, say): its first `limit`
 * bytes, each byte outside printable ASCII (and the backslash) written as `\xNN` (`\\`), so the
 * line stays one line of text; when `text` is longer, "... (N bytes)" follows, N its whole
 * length. A line then costs at most about 4 * `limit` bytes, however large the text.
 */
std::string log_excerpt(std::string_view text, std::size_t limit = log_excerpt_bytes);

} // namespace sluice
