// SPDX-License-Identifier: Apache-2.0
#pragma once

// The decision vectors of tests/vectors/*.txt (each file documents its format at its top): one
// file per algorithm, each a list of scenarios, each a limit and the requests made against it.

#include "sluice/config/config.hpp"
#include "support/build_paths.hpp"

#include <array>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice::store::test_vectors {

/// One request and what it must decide, or one settlement (`settle <time_ms> <delta>`). `values`
/// are the file's numbers after A|R|N: LEAKY_BUCKET {queue_size, delay or retry_after}; the
/// others {remaining, retry_after, reset_after}.
struct step {
    double time_ms = 0;
    bool allowed = false;
    /// N: refused because the cost exceeds the limit (decision::never_fits).
    bool never_fits = false;
    std::array<std::int64_t, 3> values{};
    /// The request's `cost=<n>` (1 when absent).
    std::int64_t cost = 1;
    /// A settlement by `delta` instead of a request.
    bool settle = false;
    std::int64_t delta = 0;
    int line = 0;
};

struct scenario {
    std::string name;
    config::limit limit;
    std::vector<step> steps;
};

/// A vectors file: its name under tests/vectors/ and the algorithm of all its scenarios.
struct file {
    const char* name;
    config::algorithm algo;
};

inline constexpr std::array<file, 4> files{{
    {"leaky_bucket.txt", config::algorithm::leaky_bucket},
    {"token_bucket.txt", config::algorithm::token_bucket},
    {"fixed_window.txt", config::algorithm::fixed_window},
    {"sliding_window.txt", config::algorithm::sliding_window},
}};

/// How many numbers follow A|R on a request line.
inline std::size_t value_count(config::algorithm algo) {
    return algo == config::algorithm::leaky_bucket ? 2 : 3;
}

class parser {
public:
    explicit parser(file f)
        : file_(f) {}

    std::vector<scenario> load() {
        const std::string path = sluice::test::source_dir() + "/tests/vectors/" + file_.name;
        std::ifstream in(path);
        if (!in) {
            throw std::runtime_error("cannot open " + path);
        }
        std::vector<scenario> scenarios;
        std::string text;
        for (line_ = 1; std::getline(in, text); ++line_) {
            text = text.substr(0, text.find('#'));
            std::istringstream words(text);
            std::string first;
            if (!(words >> first)) {
                continue;
            }
            if (first == "scenario") {
                scenario s;
                if (!(words >> s.name)) {
                    error("scenario without a name");
                }
                s.limit = parse_limit(words);
                scenarios.push_back(std::move(s));
                continue;
            }
            if (scenarios.empty()) {
                error("request before any scenario");
            }
            std::istringstream request(text);
            parse_step(request, scenarios.back());
        }
        return scenarios;
    }

private:
    [[noreturn]] void error(const std::string& what) const {
        throw std::runtime_error(std::string(file_.name) + ":" + std::to_string(line_) + ": " +
                                 what);
    }

    config::limit parse_limit(std::istringstream& words) const {
        config::limit l;
        l.algo = file_.algo;
        std::string word;
        while (words >> word) {
            const auto eq = word.find('=');
            if (eq == std::string::npos) {
                error("expected name=value, got " + word);
            }
            const std::string name = word.substr(0, eq);
            const std::string value = word.substr(eq + 1);
            if (name == "capacity") {
                l.capacity = std::stoll(value);
            } else if (name == "flow") {
                l.flow_rate = std::stod(value);
            } else if (name == "refill") {
                l.refill_rate = std::stod(value);
            } else if (name == "limit") {
                l.limit_count = std::stoll(value);
            } else if (name == "window") {
                l.window = std::chrono::milliseconds(std::stoll(value));
            } else if (name == "mode" && (value == "shape" || value == "police")) {
                l.mode =
                    value == "shape" ? config::shaping_mode::shape : config::shaping_mode::police;
            } else if (name == "max_delay") {
                l.max_delay = std::chrono::milliseconds(std::stoll(value));
            } else {
                error("unknown setting " + word);
            }
        }
        return l;
    }

    void parse_step(std::istringstream& words, scenario& s) const {
        const std::size_t n = value_count(file_.algo);
        step st;
        st.line = line_;
        std::string first;
        words >> first;
        if (first == "settle") {
            st.settle = true;
            if (!(words >> st.time_ms >> st.delta) || (words >> first)) {
                error("expected settle <time_ms> <delta>");
            }
            s.steps.push_back(st);
            return;
        }
        std::string verdict;
        bool ok = !first.empty() && static_cast<bool>(words >> verdict);
        if (ok) {
            st.time_ms = std::stod(first);
        }
        for (std::size_t i = 0; ok && i < n; ++i) {
            ok = static_cast<bool>(words >> st.values[i]);
        }
        if (!ok || (verdict != "A" && verdict != "R" && verdict != "N")) {
            error("expected <time_ms> <A|R|N> and " + std::to_string(n) + " numbers");
        }
        st.allowed = verdict == "A";
        st.never_fits = verdict == "N";
        int count = 1;
        std::array<std::int64_t, 3> increments{};
        std::string word;
        while (words >> word) {
            if (word.starts_with("cost=")) {
                st.cost = std::stoll(word.substr(5));
                continue;
            }
            ok = word.size() >= 2 && word[0] == 'x';
            for (std::size_t i = 0; ok && i < n; ++i) {
                ok = static_cast<bool>(words >> increments[i]);
            }
            if (!ok) {
                error("expected x<count> and " + std::to_string(n) + " steps, or cost=<n>");
            }
            count = std::stoi(word.substr(1));
        }
        for (int i = 0; i < count; ++i) {
            s.steps.push_back(st);
            for (std::size_t v = 0; v < n; ++v) {
                st.values[v] += increments[v];
            }
        }
    }

    file file_;
    int line_ = 0;
};

/// Every scenario of `f`; throws std::runtime_error naming the line of a malformed one.
inline std::vector<scenario> load(file f) {
    return parser(f).load();
}

} // namespace sluice::store::test_vectors
