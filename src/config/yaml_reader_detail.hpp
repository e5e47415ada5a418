// SPDX-License-Identifier: Apache-2.0
#pragma once

// Reading YAML mappings with typed getters that record problems instead of throwing, so that one
// pass over a configuration finds every mistake in it.

#include "scalars_detail.hpp"

#include <yaml-cpp/yaml.h>

#include <chrono>
#include <concepts>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::config::detail {

/// Every problem found so far, each one line "FILE:LINE: what".
class problems {
public:
    /// `yaml` is the text being read (it must outlive this), for the marks yaml-cpp gets wrong.
    problems(std::string source, std::string_view yaml)
        : source_(std::move(source))
        , yaml_(yaml) {}

    /// Records "FILE:LINE: key 'KEY': WHAT" at `at` (a 0-based yaml-cpp mark).
    void add(const YAML::Mark& at, std::string_view key, std::string_view what);

    /// Drops every later problem reported with `key` (its value is known bad already).
    void silence(std::string key) { silenced_.push_back(std::move(key)); }

    /// Records "FILE:LINE: WHAT", for problems that belong to no single key.
    void add_plain(const YAML::Mark& at, std::string_view what);

    bool empty() const noexcept { return entries_.empty(); }

    /// The problems in line order, one per line.
    std::string joined() const;

    /// "FILE:LINE" for a mark; line 1 when the mark is unknown.
    std::string where(const YAML::Mark& at) const;

    const std::string& source() const noexcept { return source_; }

    std::string_view yaml() const noexcept { return yaml_; }

    /// Records that the file set `path` (a key outside lists) at 1-based `line`.
    void locate(std::string path, int line) { key_lines_.emplace(std::move(path), line); }

    /// The keys `locate` recorded, moved out.
    std::map<std::string, int, std::less<>> take_key_lines() { return std::move(key_lines_); }

private:
    struct entry {
        int line;
        std::string text;
    };

    std::string source_;
    std::string_view yaml_;
    std::vector<entry> entries_;
    std::vector<std::string> silenced_;
    std::map<std::string, int, std::less<>> key_lines_;
};

/**
 * Reports, at its key, every scalar of `document` (keys included) that carries an explicit YAML
 * tag, that is a quoted value with no closing quote in `yaml` (yaml-cpp lets one run to the end
 * of the file), that holds a NUL, or that is not valid UTF-8. Then replaces, in place, the
 * environment references in every value (not in keys) from `env`, reporting unset variables and
 * malformed references. False when the document is nested too deep or holds too many values
 * (aliases expanding): then it must not be read further, since every alias the readers follow
 * would be expanded again (a few hundred KB of aliases, 10^9 limits built on the control thread).
 */
bool check_text(problems& report,
                std::string_view yaml,
                const YAML::Node& document,
                const std::function<std::optional<std::string>(const std::string&)>& env);

/**
 * Where a second document starts in `yaml`, or nullopt when the text holds at most one; throws
 * YAML::Exception on a syntax error. Reads events only, and at most two documents: yaml-cpp
 * 0.7.0's LoadAll never returns on some text (a ',' where a block ends, or at a document's
 * start), because its parser reports an empty document there forever without moving on.
 */
std::optional<YAML::Mark> second_document(std::string_view yaml);

/// 1-based line of a mark (1 when unknown).
int line_of(const YAML::Mark& at) noexcept;

/// What the operator wrote, for "got ..." messages: "'abc'", "a list", "a mapping", "nothing", or
/// "the value of an environment variable (not shown)". The one way a message shows a value.
std::string describe(const YAML::Node& node);

/// The tag `check_text` gives a value it substituted environment variables into: it counts as
/// unquoted, and `describe` never quotes it (a secret in the wrong key would be logged).
inline constexpr std::string_view substituted_tag = "?sluice-environment";

/// echo::hidden for a value `check_text` substituted environment variables into, which no
/// message may quote (not even in part: a host, a path); echo::shown for any other.
echo echo_of(const YAML::Node& node);

/// An item of a list, and where it is: the line of its '-' for an empty item, to which yaml-cpp
/// gives the mark of the token after it (the next item's line, or the end of the file).
struct list_item {
    YAML::Node node;
    YAML::Mark mark;
};

/// "must be EXPECTED, got WHAT", the one shape of every type and range message.
std::string must_be(std::string_view expected, const YAML::Node& got);

/// One spelling of an enumeration value.
template <class E>
struct choice {
    std::string_view name;
    E value;
};

/**
 * One YAML mapping being read. Every key that a getter asks for becomes a known key; `finish()`
 * then reports the others as unknown, suggesting the nearest known one. Getters leave their
 * output unchanged when the key is absent or its value is invalid (and report the latter), and
 * return true only when they stored a value.
 */
class mapping {
public:
    /// `at` locates the mapping itself (its key in the parent). A null node reads as empty.
    mapping(problems& report, const YAML::Node& node, const YAML::Mark& at, std::string path);

    /// Whether `name` is present, with any value. Makes `name` a known key.
    bool has(std::string_view name);

    /// The value at `name`, or an undefined node. Makes `name` a known key.
    YAML::Node get(std::string_view name);

    /// Where to point at `name`: its value, else its key, else the mapping.
    YAML::Mark mark_of(std::string_view name) const;

    /// Where `name`'s key is, else the mapping: for "is required" inside a section.
    YAML::Mark key_mark_of(std::string_view name) const;

    /// The dotted key path of `name`, e.g. "rate-limit.redis.ttl".
    std::string path_of(std::string_view name) const;

    /// Reports a problem with `name`'s value.
    void error(std::string_view name, std::string_view what);

    /// Reports that `name` must be given (at the mapping's own line).
    void require(std::string_view name, std::string_view hint = {});

    problems& report() const noexcept { return report_; }

    const YAML::Mark& mark() const noexcept { return at_; }

    const std::string& path() const noexcept { return path_; }

    bool read(std::string_view name, bool& out);

    bool read(std::string_view name, std::string& out, bool allow_empty);

    bool read_int(std::string_view name, std::int64_t& out, std::int64_t min, std::int64_t max);

    template <std::integral T>
    bool read_int(std::string_view name, T& out, std::int64_t min, std::int64_t max) {
        std::int64_t value = 0;
        if (!read_int(name, value, min, max)) {
            return false;
        }
        out = static_cast<T>(value);
        return true;
    }

    /// A rate in requests per second, > 0 and at most `max_rate`: "5", "10r/s", "600r/m",
    /// "100r/h".
    bool read_rate(std::string_view name, double& out);

    /// The largest rate: one a nanosecond.
    static constexpr double max_rate = 1e9;

    /// A duration > 0, or >= 0 when `zero_allowed`.
    bool read_duration(std::string_view name, std::chrono::milliseconds& out, bool zero_allowed);

    bool read_size(std::string_view name, std::uint64_t& out, std::uint64_t min, std::uint64_t max);

    template <class E>
    bool read_enum(std::string_view name, E& out, std::initializer_list<choice<E>> choices) {
        std::vector<std::string> names;
        for (const auto& c : choices) {
            names.emplace_back(c.name);
        }
        const auto index = read_choice(name, names);
        if (!index) {
            return false;
        }
        out = choices.begin()[*index].value;
        return true;
    }

    /**
     * The items of a list value (none when absent). A null value (`name:` with nothing after it)
     * and anything but a list are reported as "must be EXPECTED".
     */
    std::vector<list_item> read_list(std::string_view name, std::string_view expected = "a list");

    /// Reports every key that no getter asked for. Call once, after all getters.
    void finish();

private:
    struct entry {
        std::string name;
        YAML::Node key;
        YAML::Node value;
    };

    const entry* find(std::string_view name) const;

    /// The scalar text at `name`; reports "must be EXPECTED, got ..." for lists and mappings.
    std::optional<std::string> scalar(std::string_view name, std::string_view expected);

    /// `scalar`, for a number or a boolean: a quoted value ("5") is a string, so it is reported.
    std::optional<std::string> plain_scalar(std::string_view name, std::string_view expected);

    std::optional<std::size_t> read_choice(std::string_view name,
                                           const std::vector<std::string>& names);

    problems& report_;
    YAML::Mark at_;
    std::string path_;
    std::vector<entry> entries_;
    std::vector<std::string> known_;
};

} // namespace sluice::config::detail
