// SPDX-License-Identifier: Apache-2.0
#include "environment_detail.hpp"

#include <algorithm>
#include <cstdlib>

namespace sluice::config {

std::optional<std::string> process_environment(const std::string& name) {
    // Read only at start-up and on reload, on the control thread: nothing sets variables then.
    const char* value = std::getenv(name.c_str()); // NOLINT(concurrency-mt-unsafe)
    if (value == nullptr) {
        return std::nullopt;
    }
    return std::string(value);
}

namespace detail {
namespace {

bool is_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

bool is_name_char(char c) {
    return is_name_start(c) || (c >= '0' && c <= '9');
}

std::string malformed(std::size_t at, std::string_view why) {
    std::string what = "malformed environment variable reference at character ";
    what += std::to_string(at + 1);
    what += ": ";
    what.append(why);
    what += " (write $$ for a literal '$')";
    return what;
}

/**
 * The reference `${NAME}` or `${NAME:-default}` whose '$' is at `dollar` in `text`: appends its
 * value to `out` and gives where the text goes on after its '}'. Fails on a malformed reference,
 * or an unset variable without a default.
 */
parsed<std::size_t> substitute_reference(std::string_view text,
                                         std::size_t dollar,
                                         const environment& env,
                                         std::string& out) {
    using result = parsed<std::size_t>;
    const auto close = text.find('}', dollar + 2);
    if (close == std::string_view::npos) {
        return result::fail(malformed(dollar, "'${' without a closing '}'"));
    }
    const auto inside = text.substr(dollar + 2, close - dollar - 2);
    const auto separator = inside.find(":-");
    const auto name = inside.substr(0, separator);
    if (name.empty()) {
        return result::fail(malformed(dollar, "no variable name inside '${}'"));
    }
    if (!is_name_start(name.front()) || !std::all_of(name.begin(), name.end(), is_name_char)) {
        return result::fail(malformed(dollar,
                                      "a variable name is letters, digits and '_', not "
                                      "starting with a digit"));
    }
    const auto value = env ? env(std::string(name)) : std::nullopt;
    if (separator != std::string_view::npos && (!value || value->empty())) {
        out.append(inside.substr(separator + 2));
    } else if (value) {
        out.append(*value);
    } else {
        std::string what = "environment variable ";
        what += quoted(name);
        what += " is not set (${";
        what.append(name);
        what += ":-default} gives a default)";
        return result::fail(std::move(what));
    }
    return {close + 1, {}};
}

} // namespace

bool has_environment_syntax(std::string_view text) noexcept {
    for (std::size_t i = 0; i + 1 < text.size(); ++i) {
        if (text[i] == '$' && (text[i + 1] == '{' || text[i + 1] == '$')) {
            return true;
        }
    }
    return false;
}

parsed<std::string> substitute_environment(std::string_view text, const environment& env) {
    using result = parsed<std::string>;
    std::string out;
    std::size_t i = 0;
    while (i < text.size()) {
        const auto dollar = text.find('$', i);
        out.append(text.substr(i, dollar - i));
        if (dollar == std::string_view::npos) {
            break;
        }
        const auto next = dollar + 1 < text.size() ? text[dollar + 1] : '\0';
        if (next == '$') {
            out += '$';
            i = dollar + 2;
        } else if (next != '{') {
            out += '$';
            i = dollar + 1;
        } else {
            auto after = substitute_reference(text, dollar, env, out);
            if (!after.value) {
                return result::fail(std::move(after.error));
            }
            i = *after.value;
        }
        if (out.size() > max_substituted_bytes) {
            break;
        }
    }
    if (out.size() > max_substituted_bytes) {
        std::string what = "is longer than ";
        what += std::to_string(max_substituted_bytes);
        what += " bytes after substituting environment variables";
        return result::fail(std::move(what));
    }
    return {std::move(out), {}};
}

} // namespace detail
} // namespace sluice::config
