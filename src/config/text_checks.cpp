// SPDX-License-Identifier: Apache-2.0
// Checks on the text of every scalar in the document, wherever it is read later: yaml-cpp accepts
// a quoted value that runs to the end of the file, a NUL escape and bytes that are not UTF-8, and
// each of these would otherwise reach a rule name, a password or a path unnoticed. The same walk
// then replaces environment variable references in every value, so that each is read by type
// afterwards with its line intact.
#include "environment_detail.hpp"
#include "sluice/core/text.hpp"
#include "yaml_reader_detail.hpp"

#include <unordered_set>

namespace sluice::config::detail {
namespace {

/// Deeper than any configuration needs; yaml-cpp itself parsed the document with recursion.
constexpr int max_depth = 64;

/// More values than any configuration needs; aliases of aliases could otherwise make a short
/// file expand into billions of values to visit.
constexpr std::size_t max_values = 100'000;

/**
 * Whether the quoted scalar that opens at `at` in `yaml` is closed before the end of the text.
 * A scalar that is not quoted there (a block scalar, or a mark that does not point at a quote)
 * counts as closed.
 */
bool quote_closed(std::string_view yaml, std::size_t at) noexcept {
    if (at >= yaml.size() || (yaml[at] != '"' && yaml[at] != '\'')) {
        return true;
    }
    const char quote = yaml[at];
    for (std::size_t i = at + 1; i < yaml.size(); ++i) {
        if (quote == '"' && yaml[i] == '\\') {
            ++i; // the escaped character, whatever it is
        } else if (yaml[i] == quote) {
            if (quote == '\'' && i + 1 < yaml.size() && yaml[i + 1] == '\'') {
                ++i; // '' is an escaped quote
                continue;
            }
            return true;
        }
    }
    return false;
}

class text_checker {
public:
    text_checker(problems& report, std::string_view yaml, const environment& env)
        : report_(report)
        , yaml_(yaml)
        , env_(env) {}

    void check(const YAML::Node& node, const std::string& path, int depth) {
        if (depth > max_depth) {
            report_.add(node.Mark(), path, "nested deeper than " + std::to_string(max_depth));
            readable_ = false;
            return;
        }
        if (++visited_ > max_values) {
            readable_ = false;
            if (visited_ == max_values + 1) {
                report_.add(node.Mark(),
                            path,
                            "the document holds more than " + std::to_string(max_values) +
                                " values (aliases expanding?)");
            }
            return;
        }
        if (node.IsScalar()) {
            if (check_scalar(node, path)) {
                substitute(node, path);
            }
        } else if (node.IsSequence()) {
            for (std::size_t i = 0; i < node.size(); ++i) {
                check(node[i], path + "[" + std::to_string(i) + "]", depth + 1);
            }
        } else if (node.IsMap()) {
            for (const auto& item : node) {
                const auto name = item.first.IsScalar() ? item.first.Scalar() : std::string("?");
                const auto child = path.empty() ? name : path + "." + name;
                if (item.first.IsScalar()) {
                    check_scalar(item.first, child);
                } else {
                    check(item.first, child, depth + 1);
                }
                check(item.second, child, depth + 1);
            }
        }
    }

private:
    /// Reports the scalar's first problem; true when it has none.
    bool check_scalar(const YAML::Node& node, const std::string& path) {
        const auto& text = node.Scalar();
        const auto pos = node.Mark().pos;
        if (node.Tag() != "?" && node.Tag() != "!" && node.Tag() != substituted_tag) {
            // An explicit tag (!!str, !!binary, !custom): yaml-cpp keeps it but reads the text
            // as it stands, so `!!binary` base64 would be taken as the value itself.
            report_.add(node.Mark(), path, "a YAML tag is not read: write the value plainly");
        } else if (node.Tag() == "!" && pos >= 0 &&
                   !quote_closed(yaml_, static_cast<std::size_t>(pos))) {
            report_.add(node.Mark(), path, "the quoted value has no closing quote");
        } else if (text.find('\0') != std::string::npos) {
            report_.add(node.Mark(), path, "must not contain NUL");
        } else if (!is_utf8(text)) {
            report_.add(node.Mark(), path, "must be valid UTF-8 text");
        } else {
            return true;
        }
        return false;
    }

    /**
     * Replaces the environment references in a value. A value reached again through an alias
     * (same node, same position) is done once: its `$$` already became `$`. A value whose
     * reference fails is reported here, and later problems with its key are not (they would
     * only quote the raw reference). The result counts as unquoted: quotes are often needed
     * around a reference (inside `{ }`), and a number read from one is still a number. Its tag
     * (`substituted_tag`) keeps later messages from quoting it: a secret put in the wrong key
     * (`port: ${REDIS_PASSWORD}`) would be logged.
     */
    void substitute(const YAML::Node& node, const std::string& path) {
        if (!has_environment_syntax(node.Scalar())) {
            return;
        }
        const auto pos = node.Mark().pos;
        if (pos >= 0 && !substituted_.insert(static_cast<std::size_t>(pos)).second) {
            return;
        }
        auto result = substitute_environment(node.Scalar(), env_);
        if (result.value && !is_utf8(*result.value)) {
            result = parsed<std::string>::fail(
                "must be valid UTF-8 text after substituting environment variables");
        }
        if (!result.value) {
            report_.add(node.Mark(), path, result.error);
            report_.silence(path);
            return;
        }
        YAML::Node target = node; // a handle on the same value
        target = *result.value;
        target.SetTag(std::string(substituted_tag));
    }

public:
    /// Neither too deep nor too many values: the readers may go through it (each alias they
    /// follow again).
    bool readable() const noexcept { return readable_; }

private:
    problems& report_;
    std::string_view yaml_;
    const environment& env_;
    std::size_t visited_ = 0;
    bool readable_ = true;
    std::unordered_set<std::size_t> substituted_;
};

} // namespace

bool check_text(problems& report,
                std::string_view yaml,
                const YAML::Node& document,
                const environment& env) {
    text_checker checker(report, yaml, env);
    checker.check(document, "", 0);
    return checker.readable();
}

} // namespace sluice::config::detail
