// SPDX-License-Identifier: Apache-2.0
// How many documents a YAML text holds, read from parser events without building any node: the
// configuration must be one document, and yaml-cpp's LoadAll cannot be trusted to find out.
#include "yaml_reader_detail.hpp"

#include <yaml-cpp/eventhandler.h>

#include <sstream>

namespace sluice::config::detail {
namespace {

/// Counts documents and ignores everything else in them.
class document_counter final : public YAML::EventHandler {
public:
    void OnDocumentStart(const YAML::Mark& at) override {
        ++count;
        last_start = at;
    }

    void OnDocumentEnd() override {}

    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}

    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}

    void
    OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}

    void OnSequenceStart(const YAML::Mark&,
                         const std::string&,
                         YAML::anchor_t,
                         YAML::EmitterStyle::value) override {}

    void OnSequenceEnd() override {}

    void OnMapStart(const YAML::Mark&,
                    const std::string&,
                    YAML::anchor_t,
                    YAML::EmitterStyle::value) override {}

    void OnMapEnd() override {}

    int count = 0;
    YAML::Mark last_start;
};

} // namespace

std::optional<YAML::Mark> second_document(std::string_view yaml) {
    std::istringstream stream{std::string(yaml)};
    YAML::Parser parser(stream);
    document_counter counter;
    // Two calls at most, whatever the parser says about a third.
    while (counter.count < 2 && parser.HandleNextDocument(counter)) {
    }
    return counter.count >= 2 ? std::optional(counter.last_start) : std::nullopt;
}

} // namespace sluice::config::detail
