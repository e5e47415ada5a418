// SPDX-License-Identifier: Apache-2.0
#include "sluice/app/command_line.hpp"

#include <gtest/gtest.h>

#include <string_view>
#include <vector>

namespace sluice::app {
namespace {

command_line parse(std::vector<std::string_view> args) {
    return parse_command_line(args);
}

TEST(CommandLine, DefaultsToTheShippedConfig) {
    const auto c = parse({});
    EXPECT_EQ(c.config_path, "config/sluice.yaml");
    EXPECT_FALSE(c.check_config);
    EXPECT_FALSE(c.show_version);
    EXPECT_FALSE(c.show_help);
}

TEST(CommandLine, TakesTheConfigInEverySpelling) {
    EXPECT_EQ(parse({"--config", "a.yaml"}).config_path, "a.yaml");
    EXPECT_EQ(parse({"--config=b.yaml"}).config_path, "b.yaml");
    EXPECT_EQ(parse({"-c", "c.yaml"}).config_path, "c.yaml");
    // The last one wins, as with most tools.
    EXPECT_EQ(parse({"-c", "c.yaml", "--config", "d.yaml"}).config_path, "d.yaml");
}

TEST(CommandLine, ReadsTheFlags) {
    const auto c = parse({"--check-config", "--config", "x.yaml"});
    EXPECT_TRUE(c.check_config);
    EXPECT_EQ(c.config_path, "x.yaml");
    EXPECT_TRUE(parse({"--version"}).show_version);
    EXPECT_TRUE(parse({"-V"}).show_version);
    EXPECT_TRUE(parse({"--help"}).show_help);
    EXPECT_TRUE(parse({"-h"}).show_help);
}

TEST(CommandLine, RefusesAMissingOrEmptyFile) {
    EXPECT_THROW(parse({"--config"}), command_line_error);
    EXPECT_THROW(parse({"--config", ""}), command_line_error);
    EXPECT_THROW(parse({"--config="}), command_line_error);
    EXPECT_THROW(parse({"-c"}), command_line_error);
}

TEST(CommandLine, RefusesUnknownArgumentsAndNamesThem) {
    try {
        parse({"--check-config", "--verbose"});
        FAIL() << "no exception";
    } catch (const command_line_error& e) {
        EXPECT_NE(std::string_view(e.what()).find("--verbose"), std::string_view::npos);
    }
    EXPECT_THROW(parse({"sluice.yaml"}), command_line_error);
}

TEST(CommandLine, ParsesMainsArgumentsSkippingTheProgramName) {
    const char* argv[] = {"sluice", "--config", "m.yaml", "--check-config"};
    const auto c = parse_command_line(4, argv);
    EXPECT_EQ(c.config_path, "m.yaml");
    EXPECT_TRUE(c.check_config);
}

TEST(Usage, NamesEveryOption) {
    const auto text = usage("sluice");
    for (const auto* option : {"--config", "--check-config", "--version", "--help"}) {
        EXPECT_NE(text.find(option), std::string::npos) << option;
    }
}

} // namespace
} // namespace sluice::app
