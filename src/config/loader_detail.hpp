// SPDX-License-Identifier: Apache-2.0
#pragma once

// The pieces of the loader that live in their own files: limits and rules (rules.cpp) and the
// non-fatal checks across the whole configuration (warnings.cpp).

#include "sluice/config/config.hpp"
#include "yaml_reader_detail.hpp"

#include <string>
#include <vector>

namespace sluice::config::detail {

/**
 * A "limit" mapping at `path` (e.g. "rate-limit.fallback"): the algorithm, exactly the parameters
 * it takes, and the options. `at` locates the mapping; its line becomes `limit::line`.
 */
limit parse_limit(problems& report,
                  const YAML::Node& node,
                  const YAML::Mark& at,
                  const std::string& path);

/// `rate-limit.rules`: every rule, with duplicate names reported.
std::vector<rule> parse_rules(mapping& rate_limit);

/// Appends to `cfg.warnings`: Redis TTLs too short for a limit's state, and shadowed rules.
void add_warnings(config& cfg);

} // namespace sluice::config::detail
