// SPDX-License-Identifier: Apache-2.0
#pragma once

// Environment variable references in configuration values: `${NAME}`, `${NAME:-default}`, `$$`.

#include "scalars_detail.hpp"
#include "sluice/config/loader.hpp"

#include <string>
#include <string_view>

namespace sluice::config::detail {

/// The longest value a substitution may produce: far above any password or address, far below
/// what could exhaust memory when many values refer to one large variable.
inline constexpr std::size_t max_substituted_bytes = 64 * 1024;

/**
 * `text` with every `${NAME}` replaced by NAME's value from `env`, every `${NAME:-default}` by
 * the value or, when NAME is unset or empty, by `default` (taken literally, up to the first
 * '}'), and every `$$` by `$`. A '$' before anything else stays. NAME is letters, digits and
 * '_', not starting with a digit.
 *
 * The error never quotes `text` or a value, since either may be a secret: it names the variable
 * or the position of a malformed reference.
 */
parsed<std::string> substitute_environment(std::string_view text, const environment& env);

/// Whether `text` holds anything `substitute_environment` would change.
bool has_environment_syntax(std::string_view text) noexcept;

} // namespace sluice::config::detail
